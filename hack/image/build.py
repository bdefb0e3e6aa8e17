#!/usr/bin/env python3
"""Builds a container image as a deterministic OCI image archive, without Docker or a registry.

    build.py --dockerfile Dockerfile --binary target/release/twc \\
        --name temporal-worker-controller:0.1.0 --out X.oci.tar --deb libc6_....deb ...
    build.py --pause --binary pause --name localhost/twc/pause:3.10 --out pause.oci.tar
    build.py --check --dockerfile Dockerfile [--toolchain rust-toolchain.toml]
    build.py --list-packages

With --dockerfile, the image is what `docker build` makes of that Dockerfile's final (runtime)
stage: its LABELs, USER, ENV, EXPOSE, WORKDIR, ENTRYPOINT and CMD become the image's
configuration and its one `COPY --from=<build stage>` puts --binary where that COPY says, so the
Dockerfile and this builder cannot disagree. The stage must start `FROM
gcr.io/distroless/cc-debian12:nonroot`, which this builder reproduces in a layer of its own from
the Debian packages given with --deb (what distroless puts there: glibc, libgcc, libstdc++,
libgomp, libssl3, CA certificates, tzdata, netbase, media-types, base-files; /etc/passwd and
/etc/group with root, nobody and nonroot 65532; /tmp; /home/nonroot; no shell): the tree
`dpkg-deb -x` would unpack, read from `dpkg-deb --fsys-tarfile`, without maintainer scripts. Any other base, or an instruction
in that stage this builder does not know, is an error. The earlier (build) stages are only parsed.

With --pause, the image is the pod sandbox's: --binary alone at /pause, run as 65535:65535.

With --check, nothing is built: the Dockerfile must parse, its runtime stage must be one this
builder understands, and (with --toolchain) its `ARG RUST_VERSION` must equal the toolchain
file's channel.

The archive holds oci-layout, index.json and blobs/sha256/*; index.json's one manifest carries
io.containerd.image.name (the full name, e.g. docker.io/library/temporal-worker-controller:0.1.0)
and org.opencontainers.image.ref.name (the tag), which `ctr images import` names the image by.
Layers are gzip'd tars with sorted entries, mtime $SOURCE_DATE_EPOCH (default 0) and numeric
owners, so the same inputs give the same bytes and digests. Python 3 standard library only;
needs dpkg-deb for --deb.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field

DISTROLESS = "gcr.io/distroless/cc-debian12:nonroot"
NONROOT = 65532
NOBODY = 65534
PAUSE_USER = "65535:65535"

# The packages gcr.io/distroless/cc-debian12 is made of (distroless' static, base and cc
# images for Debian 12); each must be given exactly once with --deb.
PACKAGES = [
    "base-files", "netbase", "tzdata", "media-types", "ca-certificates",  # static
    "libc6", "libssl3",  # base
    "libgcc-s1", "gcc-12-base", "libstdc++6", "libgomp1",  # cc
]
# What the packages ship that the image does without: documentation (each package's copyright
# file stays, as in distroless: the image redistributes these packages), and the two scripts
# they ship, which need the shell the image does not have.
DROP_PREFIXES = ("usr/share/man/", "usr/share/info/", "usr/share/lintian/", "usr/share/doc-base/")
DROP_PATHS = {"usr/share/man", "usr/share/info", "usr/share/lintian", "usr/share/doc-base",
              "usr/sbin/update-ca-certificates", "etc/update-motd.d/10-uname"}
# None of these may be anywhere in the image (checked after assembly).
SHELLS = {"sh", "bash", "dash", "ash", "busybox", "zsh", "ksh", "mksh", "posh", "yash", "rbash"}

ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SSL_CERT_FILE = "/etc/ssl/certs/ca-certificates.crt"
LABEL_PACKAGES = "io.github.twc-rs.debian-packages"
LABEL_REVISION = "org.opencontainers.image.revision"

PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    f"nobody:x:{NOBODY}:{NOBODY}:nobody:/nonexistent:/sbin/nologin\n"
    f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = (
    "root:x:0:\n"
    f"nobody:x:{NOBODY}:\n"
    "tty:x:5:\n"
    "staff:x:50:\n"
    f"nonroot:x:{NONROOT}:\n"
)
# distroless' /etc/nsswitch.conf, verbatim.
NSSWITCH = """# /etc/nsswitch.conf
#
# Example configuration of GNU Name Service Switch functionality.
# If you have the `glibc-doc-reference' and `info' packages installed, try:
# `info libc "Name Service Switch"' for information about this file.

passwd:         compat
group:          compat
shadow:         compat
gshadow:        files

hosts:          files dns
networks:       files

protocols:      db files
services:       db files
ethers:         db files
rpc:            db files

netgroup:       nis
"""

MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"

ELF_MACHINES = {62: "amd64", 183: "arm64"}  # e_machine -> Debian/OCI architecture


class BuildError(Exception):
    pass


def fail(msg: str) -> None:
    raise BuildError(msg)


# --- Dockerfile ----------------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str  # upper case
    args: str  # the rest of the (joined) line, flags included
    line: int  # where it starts, 1-based


@dataclass
class Stage:
    base: str  # FROM's image, variables expanded
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class Dockerfile:
    path: str
    global_args: dict[str, str | None]  # ARGs before the first FROM: name -> default
    stages: list[Stage]


def parse_dockerfile(path: str, build_args: dict[str, str]) -> Dockerfile:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")

    # Parser directives: leading `# key=value` comments. Only the default escape is supported.
    for raw in lines:
        m = re.match(r"^\s*#\s*([a-zA-Z]+)\s*=\s*(.*?)\s*$", raw)
        if not m:
            break
        if m.group(1).lower() == "escape" and m.group(2) != "\\":
            fail(f"{path}: the parser directive escape={m.group(2)} is not supported (only \\)")

    instructions: list[Instruction] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            continue  # a comment, also inside a continued instruction
        if not buf and not stripped:
            continue
        if not buf:
            start = n
        if not stripped:
            continue  # an empty line inside a continued instruction
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        text = " ".join(buf)
        buf = []
        if re.search(r"<<-?\s*['\"]?[A-Za-z_]", text) and text.split()[0].upper() in ("RUN", "COPY"):
            fail(f"{path}:{start}: heredocs are not supported")
        parts = text.split(None, 1)
        instructions.append(Instruction(parts[0].upper(), parts[1] if len(parts) > 1 else "", start))
    if buf:
        fail(f"{path}:{start}: the file ends inside a continued line")

    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            words = ins.args.split()
            if any(w.startswith("--") for w in words):
                fail(f"{path}:{ins.line}: FROM flags ({ins.args}) are not supported")
            scope = {k: build_args.get(k, v) for k, v in global_args.items()}
            base = expand(words[0], scope, path, ins.line) if words else ""
            name = None
            if len(words) == 3 and words[1].upper() == "AS":
                name = words[2].lower()
            elif len(words) != 1:
                fail(f"{path}:{ins.line}: cannot parse FROM {ins.args}")
            stages.append(Stage(base, name, ins.line))
        elif not stages:
            if ins.keyword != "ARG":
                fail(f"{path}:{ins.line}: {ins.keyword} before the first FROM (only ARG may be there)")
            for word in split_words(ins.args, None, path, ins.line):
                k, eq, v = word.partition("=")
                global_args[k] = v if eq else None
        else:
            stages[-1].instructions.append(ins)
    if not stages:
        fail(f"{path}: no FROM")
    return Dockerfile(path, global_args, stages)


def expand(s: str, env: dict[str, str | None] | None, path: str, line: int) -> str:
    return "".join(lex(s, env, path, line, split=False))


def split_words(s: str, env: dict[str, str | None] | None, path: str, line: int) -> list[str]:
    return lex(s, env, path, line, split=True)


def lex(s: str, env: dict[str, str | None] | None, path: str, line: int, split: bool) -> list[str]:
    """The Dockerfile's word rules: quotes group and are removed, backslash escapes, and (when env
    is given) $VAR, ${VAR}, ${VAR:-word} and ${VAR:+word} expand outside single quotes; with split,
    unquoted whitespace separates words."""
    words: list[str] = []
    cur: list[str] = []
    in_word = False
    i = 0
    quote = None

    def var(i: int) -> tuple[str, int]:
        # s[i] == "$"
        if env is None:
            return "$", i + 1
        if i + 1 < len(s) and s[i + 1] == "{":
            end = s.find("}", i + 2)
            if end < 0:
                fail(f"{path}:{line}: unterminated ${{ in {s!r}")
            inner = s[i + 2:end]
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?::([-+])(.*))?", inner)
            if not m:
                fail(f"{path}:{line}: unsupported substitution ${{{inner}}}")
            value = env.get(m.group(1)) or ""
            if m.group(2) == "-" and not value:
                value = m.group(3)
            elif m.group(2) == "+":
                value = m.group(3) if value else ""
            return value, end + 1
        m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", s[i + 1:])
        if not m:
            return "$", i + 1
        return env.get(m.group(0)) or "", i + 1 + m.end()

    while i < len(s):
        c = s[i]
        if quote == "'":
            if c == "'":
                quote = None
            else:
                cur.append(c)
            i += 1
        elif quote == '"':
            if c == '"':
                quote = None
                i += 1
            elif c == "\\" and i + 1 < len(s) and s[i + 1] in '"\\$':
                cur.append(s[i + 1])
                i += 2
            elif c == "$":
                v, i = var(i)
                cur.append(v)
            else:
                cur.append(c)
                i += 1
        elif split and c.isspace():
            if in_word:
                words.append("".join(cur))
                cur, in_word = [], False
            i += 1
        else:
            in_word = True
            if c in "'\"":
                quote = c
                i += 1
            elif c == "\\" and i + 1 < len(s):
                cur.append(s[i + 1])
                i += 2
            elif c == "$":
                v, i = var(i)
                cur.append(v)
            else:
                cur.append(c)
                i += 1
    if quote:
        fail(f"{path}:{line}: unterminated {quote} in {s!r}")
    if in_word or not split:
        words.append("".join(cur))
    return words


@dataclass
class Runtime:
    """What the runtime stage makes of the image."""

    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the base's, then the stage's ENVs
    user: str | None = None
    workdir: str | None = None
    ports: list[str] = field(default_factory=list)
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    copy_from: str | None = None  # the COPY's source, in its build stage
    copy_to: str | None = None  # where the binary goes
    copy_mode: int = 0o755
    copy_owner: tuple[int, int] = (0, 0)
    history: list[tuple[str, bool]] = field(default_factory=list)  # (created_by, empty_layer)


KNOWN = ["ARG", "ENV", "LABEL", "USER", "WORKDIR", "EXPOSE", "ENTRYPOINT", "CMD", "COPY"]


def runtime_stage(df: Dockerfile, build_args: dict[str, str]) -> Runtime:
    stage = df.stages[-1]
    where = f"{df.path}:{stage.line}"
    if stage.base != DISTROLESS:
        fail(f"{where}: the runtime stage is FROM {stage.base}; hack/image/build.py reproduces only "
             f"{DISTROLESS} (from Debian packages), so the final stage must start FROM {DISTROLESS}")
    stage_names = {s.name: i for i, s in enumerate(df.stages[:-1]) if s.name}
    rt = Runtime(user=str(NONROOT), workdir="/home/nonroot")  # distroless :nonroot's own config
    scope: dict[str, str | None] = {}  # ARGs and ENVs seen so far in the stage
    env = rt.env
    env.update({"PATH": ENV_PATH, "SSL_CERT_FILE": SSL_CERT_FILE})  # distroless' own
    for ins in stage.instructions:
        at = f"{df.path}:{ins.line}"
        kw, args = ins.keyword, ins.args
        vars_ = {**scope, **env}
        if kw == "ARG":
            for word in split_words(args, None, df.path, ins.line):
                k, eq, v = word.partition("=")
                if k in build_args:
                    scope[k] = build_args[k]
                elif eq:
                    scope[k] = expand(v, vars_, df.path, ins.line)
                else:
                    scope[k] = df.global_args.get(k)
            rt.history.append((f"ARG {args}", True))
        elif kw in ("ENV", "LABEL"):
            pairs = key_values(kw, args, vars_, df.path, ins.line)
            for k, v in pairs:
                if kw == "ENV":
                    env[k] = v
                else:
                    rt.labels[k] = v
            rt.history.append((f"{kw} " + " ".join(f"{k}={v}" for k, v in pairs), True))
        elif kw == "USER":
            rt.user = expand(args.strip(), vars_, df.path, ins.line)
            rt.history.append((f"USER {rt.user}", True))
        elif kw == "WORKDIR":
            w = expand(args.strip(), vars_, df.path, ins.line)
            rt.workdir = w if w.startswith("/") else os.path.join(rt.workdir or "/", w)
            rt.history.append((f"WORKDIR {rt.workdir}", True))
        elif kw == "EXPOSE":
            for p in split_words(args, vars_, df.path, ins.line):
                if not re.fullmatch(r"\d+(/(tcp|udp|sctp))?", p):
                    fail(f"{at}: cannot parse the port {p!r} of EXPOSE")
                rt.ports.append(p if "/" in p else p + "/tcp")
            rt.history.append((f"EXPOSE {args}", True))
        elif kw in ("ENTRYPOINT", "CMD"):
            try:
                value = json.loads(args)
            except ValueError:
                value = None
            if not (isinstance(value, list) and all(isinstance(x, str) for x in value)):
                fail(f'{at}: {kw} must be in exec form (["prog", "arg"]): the shell form runs '
                     "/bin/sh -c, and the image has no shell")
            if kw == "ENTRYPOINT":
                rt.entrypoint = value
                rt.cmd = None  # ENTRYPOINT resets an inherited CMD (distroless has none)
            else:
                rt.cmd = value
            rt.history.append((f"{kw} {json.dumps(value)}", True))
        elif kw == "COPY":
            words = split_words(args, vars_, df.path, ins.line)
            flags = [w for w in words if w.startswith("--")]
            rest = [w for w in words if not w.startswith("--")]
            src_stage = None
            for flag in flags:
                k, _, v = flag.partition("=")
                if k == "--from":
                    src_stage = v
                elif k == "--chmod" and re.fullmatch(r"[0-7]{3,4}", v):
                    rt.copy_mode = int(v, 8)
                elif k == "--chown" and re.fullmatch(r"\d+(:\d+)?", v):
                    uid, _, gid = v.partition(":")
                    rt.copy_owner = (int(uid), int(gid or uid))
                elif k == "--link":
                    pass
                else:
                    fail(f"{at}: COPY flag {flag} is not supported (only --from, --link, an octal "
                         "--chmod and a numeric --chown)")
            if rt.copy_to is not None:
                fail(f"{at}: a second COPY: the runtime stage may COPY one file, the binary")
            if src_stage is None or len(rest) != 2:
                fail(f"{at}: the runtime stage's COPY must be `COPY --from=<build stage> <binary> "
                     "<destination>`: one file, the binary this builder is given")
            if src_stage.lower() not in stage_names and not (
                src_stage.isdigit() and int(src_stage) < len(df.stages) - 1
            ):
                fail(f"{at}: COPY --from={src_stage} names no earlier stage")
            src, dst = rest
            if dst.endswith("/"):
                dst += os.path.basename(src)
            if not dst.startswith("/"):
                dst = os.path.join(rt.workdir or "/", dst)
            rt.copy_from, rt.copy_to = src, os.path.normpath(dst)
            rt.history.append((f"COPY {args}", False))
        elif kw == "RUN":
            fail(f"{at}: RUN in the runtime stage: it would need a shell, which {DISTROLESS} "
                 "lacks, and hack/image/build.py runs nothing")
        else:
            fail(f"{at}: hack/image/build.py does not understand {kw} in the runtime stage "
                 f"(it knows {', '.join(KNOWN)}): teach it, or move {kw} out of that stage")
    if rt.copy_to is None:
        fail(f"{df.path}:{stage.line}: the runtime stage has no `COPY --from=<build stage>` of the binary")
    if rt.entrypoint is None and rt.cmd is None:
        fail(f"{df.path}:{stage.line}: the runtime stage sets neither ENTRYPOINT nor CMD")
    return rt


def key_values(kw: str, args: str, env: dict, path: str, line: int) -> list[tuple[str, str]]:
    words = split_words(args, env, path, line)
    if not words:
        fail(f"{path}:{line}: {kw} with nothing to set")
    if "=" not in words[0]:
        # The legacy form `ENV KEY value with spaces`.
        if kw != "ENV" or len(words) < 2:
            fail(f"{path}:{line}: cannot parse {kw} {args}")
        key, value = args.strip().split(None, 1)
        return [(key, expand(value, env, path, line))]
    pairs = []
    for w in words:
        k, eq, v = w.partition("=")
        if not eq or not k:
            fail(f"{path}:{line}: {kw}: {w!r} is not KEY=VALUE")
        pairs.append((k, v))
    return pairs


def rust_version_arg(df: Dockerfile) -> str | None:
    return df.global_args.get("RUST_VERSION")


def toolchain_channel(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    try:
        import tomllib

        channel = tomllib.loads(data.decode()).get("toolchain", {}).get("channel")
    except ImportError:  # Python < 3.11
        m = re.search(rb'^\s*channel\s*=\s*"([^"]+)"', data, re.M)
        channel = m.group(1).decode() if m else None
    if not channel:
        fail(f"{path} has no [toolchain] channel")
    return channel


# --- Files and layers ----------------------------------------------------------------------------


@dataclass
class Entry:
    kind: bytes  # tarfile.REGTYPE, DIRTYPE or SYMTYPE
    mode: int
    uid: int = 0
    gid: int = 0
    data: bytes = b""
    link: str = ""


def add(tree: dict[str, Entry], path: str, e: Entry, origin: str) -> None:
    old = tree.get(path)
    if old is None:
        tree[path] = e
    elif old.kind == tarfile.DIRTYPE and e.kind == tarfile.DIRTYPE:
        pass  # several packages ship the same directory: dpkg keeps the first one's
    elif (old.kind, old.mode, old.data, old.link) != (e.kind, e.mode, e.data, e.link):
        fail(f"{origin} ships /{path}, which another package ships differently")


def parents(tree: dict[str, Entry]) -> None:
    for path in list(tree):
        d = os.path.dirname(path)
        while d and d not in tree:
            tree[d] = Entry(tarfile.DIRTYPE, 0o755)
            d = os.path.dirname(d)


def dpkg_deb(*args: str) -> bytes:
    try:
        return subprocess.run(["dpkg-deb", *args], check=True, capture_output=True).stdout
    except FileNotFoundError:
        fail("dpkg-deb is not installed (Debian's dpkg package)")
    except subprocess.CalledProcessError as e:
        fail(f"dpkg-deb {' '.join(args)} failed: {e.stderr.decode(errors='replace').strip()}")


def dropped(path: str) -> bool:
    if path in DROP_PATHS or path.startswith(DROP_PREFIXES):
        return True
    if path.startswith("usr/share/doc/"):
        # Keep each package's copyright file (and the doc directory that holds it, or the
        # symlink libstdc++6 and friends have to gcc-12-base's).
        parts = path.split("/")
        return not (len(parts) == 4 or (len(parts) == 5 and parts[4] == "copyright"))
    return False


def base_tree(debs: list[str], arch: str) -> tuple[dict[str, Entry], list[tuple[str, str]]]:
    """The files of gcr.io/distroless/cc-debian12:nonroot, from these packages."""
    controls = {}
    for deb in debs:
        control = dpkg_deb("--info", deb, "control").decode()
        fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", control, re.M))
        name = fields.get("Package", "")
        if name not in PACKAGES:
            fail(f"{deb} is the package {name!r}, which the base does not contain (it takes "
                 f"{', '.join(PACKAGES)})")
        if name in controls:
            fail(f"the package {name} is given twice ({controls[name][0]} and {deb})")
        if fields.get("Architecture") not in (arch, "all"):
            fail(f"{deb} is for {fields.get('Architecture')}, the binary for {arch}")
        controls[name] = (deb, fields["Version"], control)
    missing = [p for p in PACKAGES if p not in controls]
    if missing:
        fail(f"the base needs the Debian package(s) {', '.join(missing)} (--deb)")

    tree: dict[str, Entry] = {}
    for name in PACKAGES:
        deb = controls[name][0]
        data = dpkg_deb("--fsys-tarfile", deb)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = {os.path.normpath(m.name).lstrip("/"): m for m in tar.getmembers()}
            for path, m in members.items():
                if path in (".", "") or dropped(path):
                    continue
                if m.islnk():  # a hard link becomes a copy of its file
                    target = members.get(os.path.normpath(m.linkname).lstrip("/"))
                    if target is None or not target.isfile():
                        fail(f"{deb}: the hard link /{path} points at /{m.linkname}, not a file")
                    m = target
                if m.isdir():
                    e = Entry(tarfile.DIRTYPE, m.mode, m.uid, m.gid)
                elif m.isfile():
                    e = Entry(tarfile.REGTYPE, m.mode, m.uid, m.gid, tar.extractfile(m).read())
                elif m.issym():
                    e = Entry(tarfile.SYMTYPE, 0o777, m.uid, m.gid, link=m.linkname)
                else:
                    fail(f"{deb}: /{path} is of a kind this builder does not unpack")
                add(tree, path, e, deb)

    # update-ca-certificates' bundle: every certificate ca-certificates ships, in order, each
    # ending in a newline.
    certs = sorted(p for p in tree if p.startswith("usr/share/ca-certificates/") and p.endswith(".crt"))
    if not certs:
        fail("ca-certificates ships no certificates under /usr/share/ca-certificates")
    bundle = b"".join(tree[p].data if tree[p].data.endswith(b"\n") else tree[p].data + b"\n"
                      for p in certs)
    generated = {
        "etc/ssl/certs/ca-certificates.crt": Entry(tarfile.REGTYPE, 0o644, data=bundle),
        "etc/passwd": Entry(tarfile.REGTYPE, 0o644, data=PASSWD.encode()),
        "etc/group": Entry(tarfile.REGTYPE, 0o644, data=GROUP.encode()),
        "etc/nsswitch.conf": Entry(tarfile.REGTYPE, 0o644, data=NSSWITCH.encode()),
        "root": Entry(tarfile.DIRTYPE, 0o700),
        "home": Entry(tarfile.DIRTYPE, 0o755),
        "home/nonroot": Entry(tarfile.DIRTYPE, 0o700, NONROOT, NONROOT),
        "tmp": Entry(tarfile.DIRTYPE, 0o1777),
        "var/lib/dpkg/status.d": Entry(tarfile.DIRTYPE, 0o755),
    }
    # As distroless: each package's control file, for scanners that look for what is installed.
    for name, (_, _, control) in controls.items():
        generated[f"var/lib/dpkg/status.d/{name}"] = Entry(
            tarfile.REGTYPE, 0o644, data=control.encode() if control.endswith("\n") else (control + "\n").encode())
    tree.update(generated)
    parents(tree)

    shells = sorted("/" + p for p in tree if os.path.basename(p) in SHELLS)
    if shells:
        fail(f"the base would contain a shell: {', '.join(shells)}")
    versions = [(name, controls[name][1]) for name in sorted(controls)]
    return tree, versions


def layer(tree: dict[str, Entry], mtime: int) -> tuple[bytes, bytes]:
    """The layer's tar and its gzip: entries sorted by path, one mtime, numeric owners."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(tree, key=lambda p: p.encode()):
            e = tree[path]
            info = tarfile.TarInfo(path)
            info.type = e.kind
            info.mode = e.mode & 0o7777
            info.uid, info.gid = e.uid, e.gid
            info.uname = info.gname = ""
            info.mtime = mtime
            if e.kind == tarfile.SYMTYPE:
                info.linkname = e.link
                tar.addfile(info)
            elif e.kind == tarfile.REGTYPE:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                tar.addfile(info)
    raw = buf.getvalue()
    return raw, gzip.compress(raw, compresslevel=6, mtime=0)  # gzip -6, as docker; -9 is 1% smaller, 3x slower


def elf_arch(binary: bytes, path: str) -> str:
    if binary[:4] != b"\x7fELF" or len(binary) < 20:
        fail(f"{path} is not an ELF executable")
    machine = int.from_bytes(binary[18:20], "little" if binary[5] == 1 else "big")
    if machine not in ELF_MACHINES:
        fail(f"{path} is for ELF machine {machine}, which this builder has no mapping for")
    return ELF_MACHINES[machine]


# --- Image ---------------------------------------------------------------------------------------


def normalize(name: str) -> tuple[str, str]:
    """(full name, tag), as Docker and the kubelet normalize a reference: `foo:1` is
    docker.io/library/foo:1."""
    if "@" in name:
        fail(f"--name {name}: a digest cannot be given, only a tag")
    repo, tag = name, "latest"
    if ":" in name.rsplit("/", 1)[-1]:
        repo, tag = name.rsplit(":", 1)
    first, _, rest = repo.partition("/")
    if not rest or not ("." in first or ":" in first or first == "localhost"):
        repo = "docker.io/" + (repo if rest else "library/" + repo)
    if not re.fullmatch(r"[\w][\w.-]{0,127}", tag) or repo != repo.lower():
        fail(f"--name {name} is not a valid image reference")
    return f"{repo}:{tag}", tag


def blob(blobs: dict[str, bytes], data: bytes, media_type: str) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def rfc3339(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def dumps(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_archive(out: str, full_name: str, tag: str, arch: str, config: dict,
                  layers: list[tuple[bytes, bytes]], mtime: int) -> tuple[int, int]:
    blobs: dict[str, bytes] = {}
    config["rootfs"] = {"type": "layers",
                        "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest() for raw, _ in layers]}
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": blob(blobs, dumps(config), MT_CONFIG),
        "layers": [blob(blobs, gz, MT_LAYER) for _, gz in layers],
    }
    desc = blob(blobs, dumps(manifest), MT_MANIFEST)
    desc["platform"] = {"architecture": arch, "os": "linux"}
    desc["annotations"] = {"io.containerd.image.name": full_name,
                           "org.opencontainers.image.ref.name": tag}
    index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [desc]}
    files = {"oci-layout": dumps({"imageLayoutVersion": "1.0.0"}), "index.json": dumps(index)}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data

    tmp = out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with tarfile.open(tmp, mode="w:", format=tarfile.GNU_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
            tar.addfile(info)
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, mtime
            tar.addfile(info, io.BytesIO(files[path]))
    os.replace(tmp, out)
    return sum(len(gz) for _, gz in layers), sum(len(raw) for raw, _ in layers)


def build(args: argparse.Namespace) -> None:
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH") or 0)
    full_name, tag = normalize(args.name)
    try:
        with open(args.binary, "rb") as f:
            binary = f.read()
    except OSError as e:
        fail(f"cannot read the binary {args.binary}: {e.strerror}")
    arch = elf_arch(binary, args.binary)
    created = rfc3339(mtime)

    if args.pause:
        tree = {"pause": Entry(tarfile.REGTYPE, 0o755, data=binary)}
        layers = [layer(tree, mtime)]
        config = {
            "User": PAUSE_USER,
            "Entrypoint": ["/pause"],
            "Env": [f"PATH={ENV_PATH}"],
        }
        if args.revision:
            config["Labels"] = {LABEL_REVISION: args.revision}
        history = [{"created": created, "created_by": "COPY pause /pause"},
                   {"created": created, "created_by": f"USER {PAUSE_USER}", "empty_layer": True},
                   {"created": created, "created_by": 'ENTRYPOINT ["/pause"]', "empty_layer": True}]
    else:
        df = parse_dockerfile(args.dockerfile, args.build_arg)
        rt = runtime_stage(df, args.build_arg)
        if os.path.basename(rt.copy_from) != os.path.basename(args.binary):
            fail(f"{args.dockerfile} copies {rt.copy_from} into the image, but the binary given is "
                 f"{args.binary}: wrong Dockerfile or wrong binary?")
        base, versions = base_tree(args.deb, arch)
        top = {rt.copy_to.lstrip("/"): Entry(tarfile.REGTYPE, rt.copy_mode, *rt.copy_owner, data=binary)}
        parents(top)
        for d in list(top):
            if d in base and top[d].kind == tarfile.DIRTYPE:
                top[d] = base[d]  # the same directory as the base has it
        layers = [layer(base, mtime), layer(top, mtime)]
        labels = dict(rt.labels)
        labels[LABEL_PACKAGES] = ",".join(f"{n}={v}" for n, v in versions)
        if args.revision:
            labels[LABEL_REVISION] = args.revision
        config = {"User": rt.user, "Env": [f"{k}={v}" for k, v in rt.env.items()], "Labels": labels}
        if rt.workdir:
            config["WorkingDir"] = rt.workdir
        if rt.ports:
            config["ExposedPorts"] = {p: {} for p in rt.ports}
        if rt.entrypoint is not None:
            config["Entrypoint"] = rt.entrypoint
        if rt.cmd is not None:
            config["Cmd"] = rt.cmd
        history = [{"created": created, "created_by": f"{DISTROLESS}, reproduced by hack/image/build.py "
                    "from Debian packages: " + " ".join(f"{n}={v}" for n, v in versions)}]
        history += [{"created": created, "created_by": c, **({"empty_layer": True} if e else {})}
                    for c, e in rt.history]

    image = {"created": created, "architecture": arch, "os": "linux", "config": config,
             "history": history}
    compressed, uncompressed = write_archive(args.out, full_name, tag, arch, image, layers, mtime)
    print(f"{full_name}  {mib(compressed)} compressed, {mib(uncompressed)} uncompressed  ->  {args.out}")


def mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB ({n:,} bytes)"


def check(args: argparse.Namespace) -> None:
    df = parse_dockerfile(args.dockerfile, args.build_arg)
    rt = runtime_stage(df, args.build_arg)
    if args.toolchain:
        channel = toolchain_channel(args.toolchain)
        rust = rust_version_arg(df)
        if rust is None:
            fail(f"{args.dockerfile} declares no `ARG RUST_VERSION=...` before its first FROM "
                 f"({args.toolchain} says {channel})")
        if rust != channel:
            fail(f"{args.dockerfile} has ARG RUST_VERSION={rust}, {args.toolchain} has channel "
                 f"\"{channel}\": keep them equal")
    print(f"ok: {args.dockerfile}: {len(df.stages)} stage(s); the runtime stage "
          f"(FROM {DISTROLESS}) copies {rt.copy_from} to {rt.copy_to}, "
          f"ENTRYPOINT {json.dumps(rt.entrypoint)}"
          + (f" CMD {json.dumps(rt.cmd)}" if rt.cmd is not None else "") + f", USER {rt.user}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dockerfile", help="the Dockerfile whose runtime stage the image is")
    p.add_argument("--pause", action="store_true", help="build the pod sandbox (pause) image")
    p.add_argument("--check", action="store_true", help="only check the Dockerfile")
    p.add_argument("--list-packages", action="store_true",
                   help="print the Debian packages the base is made of, one a line")
    p.add_argument("--toolchain", help="with --check: rust-toolchain.toml, whose channel "
                   "ARG RUST_VERSION must equal")
    p.add_argument("--binary", help="the binary the runtime stage's COPY puts in the image")
    p.add_argument("--name", help="the image's name, e.g. temporal-worker-controller:0.1.0")
    p.add_argument("--out", help="the OCI archive to write")
    p.add_argument("--deb", action="append", default=[], help="a Debian package of the base "
                   f"(each of {', '.join(PACKAGES)} once)")
    p.add_argument("--revision", default="", help=f"the git commit, as the label {LABEL_REVISION}")
    p.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="as docker build's --build-arg")
    args = p.parse_args()
    try:
        build_args = {}
        for a in args.build_arg:
            k, eq, v = a.partition("=")
            if not eq:
                fail(f"--build-arg {a}: expected KEY=VALUE")
            build_args[k] = v
        args.build_arg = build_args
        if args.list_packages:
            print("\n".join(PACKAGES))
            return 0
        if args.check:
            if not args.dockerfile:
                fail("--check needs --dockerfile")
            check(args)
            return 0
        if bool(args.pause) == bool(args.dockerfile):
            fail("give one of --dockerfile and --pause")
        for opt in ("binary", "name", "out"):
            if not getattr(args, opt):
                fail(f"--{opt} is required")
        if args.pause and args.deb:
            fail("the pause image has no base: --deb does not go with --pause")
        build(args)
    except BuildError as e:
        print(f"build.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
