// llama.cpp's plain greedy decode with no Python in the loop: the reference for
// `specmon bench engines --reference BIN`. One context, the prompt as specmon feeds it, then one token per
// llama_decode, argmax over the logits (as specmon's greedy rounds). Prints two lines:
//   decoded N tokens: loop MS ms, llama_decode MS ms
//   tokens: ID ID ...
// timing the N decodes after the first token: the whole loop (decode + argmax), and llama_decode
// alone; then every generated token id (the first included), to compare with specmon's output.
//
// usage: llamacpp_reference MODEL.gguf N_NEW THREADS EXTRA_BUFTS(0|1) PROMPT
// Build it against the library llama-cpp-python installed, with the headers of the same version's source:
//   pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcpp
//   tar xzf /tmp/lcpp/llama_cpp_python-0.3.36.tar.gz -C /tmp/lcpp
//   SRC=/tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp LIB=.venv/lib/python3.11/site-packages/llama_cpp/lib
//   g++ -O2 -std=c++17 scripts/llamacpp_reference.cpp -I$SRC/include -I$SRC/ggml/include \
//       -L$LIB -lllama -lggml -lggml-base -Wl,-rpath,$LIB -o /tmp/llamacpp_reference
// Extra buffer types (weight repacking) follow specmon's choice: off where the build has AMX kernels
// and the CPU runs them. The "C loop" row's identical count compares its greedy text with specmon's
// plain text through llama.cpp.
#include "llama.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static double now_ms() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

static llama_token argmax(const float * logits, int n_vocab) {
    int best = 0;
    for (int i = 1; i < n_vocab; i++) {
        if (logits[i] > logits[best]) best = i;
    }
    return best;
}

int main(int argc, char ** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODEL.gguf N_NEW THREADS EXTRA_BUFTS(0|1) PROMPT\n", argv[0]);
        return 2;
    }
    const int n_new = atoi(argv[2]), threads = atoi(argv[3]);
    const std::string prompt = argv[5];
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);  // quiet: one line out
    llama_backend_init();

    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = 0;
    mparams.use_extra_bufts = atoi(argv[4]) != 0;  // specmon turns them off on AMX CPUs
    llama_model * model = llama_model_load_from_file(argv[1], mparams);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    std::vector<llama_token> tokens(prompt.size() + 8);
    const int n_prompt = llama_tokenize(vocab, prompt.c_str(), (int) prompt.size(), tokens.data(),
                                        (int) tokens.size(), false, true);  // as specmon: no BOS, specials parsed
    if (n_prompt <= 0) { fprintf(stderr, "cannot tokenize the prompt\n"); return 1; }
    tokens.resize(n_prompt);

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = n_prompt + n_new + 8;
    cparams.n_batch = cparams.n_ubatch = n_prompt > 512 ? n_prompt : 512;
    cparams.n_threads = cparams.n_threads_batch = threads;
    llama_context * ctx = llama_init_from_model(model, cparams);
    if (!ctx) { fprintf(stderr, "cannot make a context\n"); return 1; }

    // as specmon: all but the last prompt token in one batch, then the last alone (a batch rounds
    // apart from single-token kernels in the last bits, which can flip a near-tie later on)
    if (n_prompt > 1 && llama_decode(ctx, llama_batch_get_one(tokens.data(), n_prompt - 1))) {
        fprintf(stderr, "prefill failed\n");
        return 1;
    }
    if (llama_decode(ctx, llama_batch_get_one(&tokens[n_prompt - 1], 1))) { fprintf(stderr, "decode failed\n"); return 1; }
    llama_token next = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
    std::vector<llama_token> generated = {next};
    int decoded = 0;
    double in_decode = 0.0;
    const double start = now_ms();
    while (decoded + 1 < n_new && !llama_vocab_is_eog(vocab, next)) {  // engines also count n_new - 1 after the first
        const double t = now_ms();
        if (llama_decode(ctx, llama_batch_get_one(&next, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
        in_decode += now_ms() - t;
        next = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
        generated.push_back(next);
        decoded++;
    }
    const double loop_ms = now_ms() - start;
    printf("decoded %d tokens: loop %.3f ms, llama_decode %.3f ms\ntokens:", decoded, loop_ms, in_decode);
    for (llama_token t : generated) printf(" %d", t);
    printf("\n");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
