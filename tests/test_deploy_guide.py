"""docs/deploy.md, the three-machine guide: every fedstream command it shows parses with the real
command line, its config file loads with two clients, and the links into the deployment docs
point at headings that exist."""

import re
import shlex
from pathlib import Path

import pytest

from fedstream.cli import build_parser
from fedstream.config import load_config

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "deploy.md"
DEPLOY_DOCS = ("docs/deploy.md", "docs/deploy-protocol.md", "docs/notes/deploy-measurements.md")


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def guide_commands() -> list[list[str]]:
    """The ``fedstream ...`` commands of the guide's bash blocks and systemd units (continuation
    lines joined, comments dropped, the placeholder index M read as 0)."""
    text = GUIDE.read_text(encoding="utf-8")
    lines = []
    for block in _blocks(text, "bash") + _blocks(text, "ini"):
        lines += block.replace("\\\n", " ").splitlines()
    commands = []
    for line in lines:
        line = line.strip().removeprefix("ExecStart=")
        if "=" in line.split(" ")[0]:  # another unit setting (WorkingDirectory=...)
            continue
        words = shlex.split(line, comments=True)
        if words and Path(words[0]).name == "fedstream":
            commands.append(["0" if w == "M" else w for w in words[1:]])
    return commands


def test_the_guide_shows_the_commands_of_each_machine():
    actions = {tuple(c[:2]) for c in guide_commands()}
    assert {("deploy", "credentials"), ("deploy", "local"), ("serve", "server"), ("serve", "client"),
            ("deploy", "app")} <= actions


@pytest.mark.parametrize("command", guide_commands(), ids=lambda c: " ".join(c[:3]))
def test_every_command_of_the_guide_parses(command):
    args = build_parser().parse_args(command)  # exits 2 on an unknown option or a missing argument
    if command[0] == "serve":
        assert args.tls_dir is not None or "--tls-dir" not in command


def test_the_guide_s_config_file_loads_with_two_clients(tmp_path):
    (toml,) = _blocks(GUIDE.read_text(encoding="utf-8"), "toml")
    path = tmp_path / "imnist-2.toml"
    path.write_text(toml)
    config = load_config(str(path))
    assert config["task"] == "ovfl" and config["vfl.clients"] == 2 and config["data.name"] == "imnist"


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


@pytest.mark.parametrize("source", ["README.md", "docs/selection.md", *DEPLOY_DOCS])
def test_links_into_the_deployment_docs_resolve(source):
    path = ROOT / source
    text = path.read_text(encoding="utf-8")
    for target, anchor in re.findall(r"\]\(([^)#\s]*\.md)?#([^)\s]+)\)", text):
        doc = (path.parent / target).resolve() if target else path
        rel = doc.relative_to(ROOT).as_posix()
        if rel in DEPLOY_DOCS:
            assert anchor in _anchors(doc), f"{source}: link to {rel}#{anchor}"
