"""`specmon models list|pull|export`: the embedded models, and Hugging Face folders made from them."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

from specmon.backends import modelstore
from specmon.cli.flags import whole
from specmon.console import err, notice, say
from specmon.errors import SpecmonError


def add_models(sub) -> None:
    command = sub.add_parser(
        "models",
        help="list and pull embedded models; export a model as an HF folder",
        description="The embedded models ship with specmon. GPU models (EXL3 for ExLlamaV3, EXL2 for "
        "ExLlamaV2) are folders you download yourself: specmon fetches nothing. `models list` says how.",
    )
    command.set_defaults(handler=cmd_models)
    models = command.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    models.add_parser("list", help="embedded models and whether each is here")
    pull = models.add_parser("pull", help="copy an embedded model into the cache, checked by sha256")
    pull.add_argument("name", nargs="?", default=modelstore.SMOLLM2.name)
    export = models.add_parser(
        "export",
        help="write a model as a Hugging Face folder (for the ExLlamas or the torch backend)",
        description="Write config.json, model.safetensors, tokenizer.json and tokenizer_config.json. "
        "--layers N keeps the first N layers: a small draft model of the same family.",
    )
    export.add_argument("source", help="an embedded model name or a .gguf file")
    export.add_argument("out", type=Path, help="folder to write (replaced atomically)")
    export.add_argument("--layers", type=whole(0), default=0, help="keep only the first N layers (default: all)")
    export.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default="float16")


def cmd_models(args) -> int:
    if args.models_command == "list":
        for model in modelstore.EMBEDDED.values():
            path, state = modelstore.locate(model.name)
            where = {
                "ok": str(path),
                "damaged": f"{path}: damaged, sha256 mismatch (specmon models pull {model.name})",
                "not pulled": f"not pulled (specmon models pull {model.name})",
            }[state]
            say(f"{model.name}  {model.package}=={model.version}  {where}", soft_wrap=True)
        notice(
            "GPU models are folders you download yourself; specmon fetches nothing. For ExLlamaV3, an EXL3 "
            "quantisation (one branch per bitrate: see the model page) and a 1B draft of the same family, e.g.:"
        )
        print(  # one line, whatever the width: it is copied whole
            "  huggingface-cli download turboderp/Llama-3.1-8B-Instruct-exl3 --revision 4.0bpw "
            "--local-dir ~/models/Llama-3.1-8B-Instruct-exl3-4.0bpw",
            file=sys.stderr,
        )
        notice("then set both folders' paths in a copy of profiles/exl3-llama3-8b.toml (docs/backends.md)")
        return 0
    if args.models_command == "export":
        return _export_model(args)
    modelstore.cache_folder(args.name)  # an unwritable cache is one line, before any progress bar
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=err) as bar:
        task = bar.add_task(escape(f"pull {args.name}"), total=None)
        path = modelstore.pull(args.name, lambda done, total: bar.update(task, completed=done, total=total))
    say(f"{args.name}: {path} (sha256 checked)", soft_wrap=True)
    return 0


def _export_model(args) -> int:
    from specmon.backends.hf_folder import export_hf_folder  # loads torch

    source = Path(args.source)
    if not source.suffix == ".gguf":
        source = modelstore.resolve(args.source)
    elif not source.exists():
        raise SpecmonError(f"{source}: no such file")
    with err.status(
        escape(f"writing {args.out} ({args.dtype}{f', first {args.layers} layers' if args.layers else ''})")
    ):
        folder = export_hf_folder(source, args.out.expanduser(), args.layers, args.dtype)
    size = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
    say(f"{folder}: {size:.0f} MiB (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)")
    return 0
