#!/usr/bin/env python3
"""Every command in README.md is run by this test or by CI.

The README's fenced shell blocks (sh, bash, shell, console, or no language) are split into
commands (comments dropped, backslash continuations joined). Each must be in one of three
tables below, and is then checked the way its table says:

  RUN        run here, from the source root, against the build tree, at a small size;
  CI         the command .ci/run executes (checked by reading .ci/run, which CI runs);
  NOT_RUN    needs what a test cannot have (a network, a GPU, several hosts): the reason.

A command in none of them fails the test, so a new README command needs a line here. The
tools named in the README's inline code (`tilefeed-pack SRC OUT --codec jpeg-index`, ...) are
checked too: each flag they show must be one the tool's --help lists, and each is run as
written (INLINE below) with only the README's placeholders filled in: a demo dataset the
test makes for DIR and SRC (256 images: the fewest that give 8 instances one full batch of
train's default 32), a fresh folder for OUT, instance 0 of 1 for i/N, this
host for h0, a free port for 5555 and one reader for "tcp://...,...". Every other word,
default and flag is the README's.

    readme_test.py SOURCE_DIR BUILD_DIR
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

# Commands run here, with the environment that makes them small and keeps them out of the
# source tree (run.sh documents these variables).
RUN = {
    "./run.sh demo": {
        "TILEFEED_DEMO_SIZE": "--classes 2 --train-per-class 40 --val-per-class 4 --threads 2",
    },
}
# Commands CI runs: .ci/run must execute each of them as one of its lines.
CI = {"./run.sh test"}
# Commands no test can run, with the reason. Keep it short.
NOT_RUN = {
    "./run.sh test --quick": "the unit tier of ./run.sh test, which CI runs whole",
    "./run.sh lint": "part of ./run.sh test, which CI runs whole",
    "python3 tests/support/long_functions.py":
        "ctest long_functions runs it as written (with the build's python3) and fails on "
        "any function it lists",
    "tests/stress.sh 10 build/asan -R '^train_readers_faults$'":
        "ten ASan runs of one test beside a CPU hog; ctest stress_script_lists_failures "
        "checks the script",
}

SHELL_LANGUAGES = {"", "sh", "bash", "shell", "console"}
# Inline README commands: how each is run. "run": in order, each to exit 0; "background": a
# server started before the next command, which must then exit 0, and which itself must exit
# 0 afterwards (tilefeed-serve ends once its trainer has every epoch). A tool command in the
# README that is not here fails the test.
INLINE = {
    "tilefeed-pack SRC OUT": "run",
    "tilefeed-inspect OUT --verify": "run",
    "poprun --instances 8 ./train --data DIR":
        "run",  # 8 instances on 2 cores: poprun oversubscribes when it must
    "tilefeed-serve --data DIR --bind tcp://127.0.0.1:5555 --slice i/N":
        "background",
    "train --readers tcp://h0:5555,... --data DIR": "run",
}
# Other commands in the README's prose, run elsewhere with other file names: the reason.
# Each must still be in the README (so these notes cannot go stale).
ELSEWHERE = {
    "tilefeed-report run-*.jsonl -o report.html":
        "./run.sh demo (RUN above) ends with it on its own run's files (demo-metrics.*.jsonl)",
    "cmake --install build/release --prefix /usr/local":
        "the install_consumer test installs the build into a temporary prefix instead "
        "(a test does not write /usr/local)",
}
# Tools whose inline README commands have their flags checked against --help, and the
# build-tree path of each.
TOOLS = {
    "tilefeed-pack": "tools/tilefeed-pack",
    "tilefeed-inspect": "tools/tilefeed-inspect",
    "tilefeed-serve": "tools/tilefeed-serve",
    "poprun": "tools/poprun",
    "train": "tools/train",
}


def fail(message):
    print(f"readme_test: FAIL: {message}")
    sys.exit(1)


def fenced_commands(text):
    commands, language, pending = [], None, ""
    for line in text.splitlines():
        fence = re.match(r"^\s*```(\S*)", line)
        if fence:
            language = fence.group(1).lower() if language is None else None
            continue
        if language is None or language not in SHELL_LANGUAGES:
            continue
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line.startswith("#") or not line:
            continue
        if line.startswith("$ "):
            line = line[2:]
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    return commands


def inline_tool_commands(text):
    """Inline code spans that start with a tool's name followed by an argument."""
    prose = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.M | re.S)
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)]
    return [s for s in spans if s.split(" ")[0] in TOOLS and " " in s]


def ci_runs(source, command):
    lines = open(os.path.join(source, ".ci", "run")).read().splitlines()
    executed = [re.sub(r"^exec\s+", "", l).strip() for l in lines
                if l.strip() and not l.lstrip().startswith(("#", "set ", "cd "))]
    return command in executed


def run_command(source, command, extra_env, build):
    with tempfile.TemporaryDirectory(prefix="tilefeed-readme.") as work:
        env = dict(os.environ, BUILD_ROOT=work, TILEFEED_DEMO_BUILD=build, JOBS="2", **extra_env)
        try:
            done = subprocess.run(command, shell=True, cwd=source, env=env, timeout=540,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except subprocess.TimeoutExpired:
            fail(f"'{command}' did not finish in 540 s")
        if done.returncode != 0:
            fail(f"'{command}' exited {done.returncode}:\n{done.stdout[-4000:]}")
        print(f"readme_test: ran '{command}': exit 0")
        return done.stdout


def check_flags(build, span, helps):
    words = shlex.split(span)
    tool = words[0]
    # A launcher's own flags end at the program it launches ("poprun -n 8 ./train --data").
    for i, word in enumerate(words[1:], 1):
        if word == "--" or word.startswith("./"):
            nested = words[i + 1:] if word == "--" else [word[2:]] + words[i + 1:]
            problem = check_flags(build, shlex.join(nested), helps) if nested else None
            if problem:
                return problem
            words = words[:i]
            break
    if tool not in helps:
        path = os.path.join(build, TOOLS[tool])
        if not os.path.exists(path):
            return f"'{span}': {path} is not built"
        done = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=60)
        helps[tool] = done.stdout
    for word in words[1:]:
        flag = word.split("=")[0]
        if flag.startswith("--") and not re.search(re.escape(flag) + r"\b", helps[tool]):
            return f"'{span}': {tool} --help does not list {flag}"
    return None


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fill_placeholders(span, demo, out, port):
    """The README's inline command with its placeholders filled in (see the docstring)."""
    words = []
    for word in shlex.split(span):
        word = word.replace("tcp://h0:5555,...", "tcp://127.0.0.1:5555")
        word = word.replace(":5555", ":%d" % port)
        words.append({"DIR": demo, "SRC": demo, "OUT": out, "i/N": "0/1"}.get(word, word))
    return words


def run_inline_commands(build, spans):
    """Runs every INLINE command as the README writes it, from the build's tools/ folder (so
    `./train` and the bare tool names are this build's)."""
    tools = os.path.join(build, "tools")
    with tempfile.TemporaryDirectory(prefix="tilefeed-readme-inline.") as work:
        demo = os.path.join(work, "demo")
        subprocess.run([os.path.join(tools, "tilefeed-make-demo"), demo, "--classes", "2",
                        "--train-per-class", "128", "--val-per-class", "0", "--threads", "2"],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        demo = os.path.join(demo, "train")
        out, port = os.path.join(work, "out"), free_port()
        env = dict(os.environ, PATH=tools + os.pathsep + os.environ.get("PATH", ""))
        background = None
        try:
            for span in spans:
                words = fill_placeholders(span, demo, out, port)
                log = open(os.path.join(work, "%s.log" % words[0]), "w+")
                process = subprocess.Popen(words, cwd=tools, env=env, stdout=log,
                                           stderr=subprocess.STDOUT)
                if INLINE[span] == "background":
                    background = (span, process, log)
                    continue
                try:
                    rc = process.wait(timeout=400)
                except subprocess.TimeoutExpired:
                    process.kill()
                    rc = "a timeout"
                log.seek(0)
                if rc != 0:
                    fail(f"README's '{span}' (run as {shlex.join(words)}) exited {rc}:\n"
                         f"{log.read()[-3000:]}")
                print(f"readme_test: ran README's '{span}': exit 0")
            if background:
                span, process, log = background
                try:
                    rc = process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    rc = "still running after its trainer finished"
                log.seek(0)
                if rc != 0:
                    fail(f"README's '{span}' exited {rc}:\n{log.read()[-3000:]}")
                print(f"readme_test: ran README's '{span}': exit 0")
                background = None
        finally:
            if background and background[1].poll() is None:
                background[1].kill()
                background[1].wait()


def unknown_commands(commands):
    return [c for c in commands if c not in RUN and c not in CI and c not in NOT_RUN]


def self_test(text):
    """The test refuses a README that gains a command nobody runs."""
    extra = text + "\n```bash\n# a new step\ntilefeed-pack /data out \\\n  --force\n```\n"
    if unknown_commands(fenced_commands(extra)) != ["tilefeed-pack /data out  --force"]:
        fail("self-test: an added README command was not reported: " +
             repr(unknown_commands(fenced_commands(extra))))


def main():
    if len(sys.argv) != 3:
        fail("usage: readme_test.py SOURCE_DIR BUILD_DIR")
    source, build = (os.path.abspath(a) for a in sys.argv[1:])
    text = open(os.path.join(source, "README.md")).read()
    self_test(text)
    commands = fenced_commands(text)
    if not commands:
        fail("no fenced shell commands found in README.md (has the fence syntax changed?)")
    unknown = unknown_commands(commands)
    if unknown:
        fail("README commands no test or CI runs: " + "; ".join(repr(c) for c in unknown) +
             " (run them in tests/tools/readme_test.py's RUN, or list them in CI or NOT_RUN)")
    for command in commands:
        if command in CI and not ci_runs(source, command):
            fail(f"'{command}' is listed as run by CI, but .ci/run does not run it")
    helps = {}
    spans = inline_tool_commands(text)
    for span in spans:
        problem = check_flags(build, span, helps)
        if problem:
            fail(problem)
    not_run = [span for span in spans if span not in INLINE]
    if not_run:
        fail("README tool commands no test runs: " + "; ".join(repr(s) for s in not_run) +
             " (add them to tests/tools/readme_test.py's INLINE)")
    prose = " ".join(text.split())
    for command, reason in ELSEWHERE.items():
        if f"`{command}`" not in prose:
            fail(f"ELSEWHERE lists '{command}', which README.md no longer has")
        print(f"readme_test: '{command}': {reason}")
    run_inline_commands(build, spans)
    for command in commands:
        if command in RUN:
            output = run_command(source, command, RUN[command], build)
            if command == "./run.sh demo" and "epoch" not in output:
                fail(f"'{command}' printed no epoch line:\n{output[-4000:]}")
    for command in commands:
        if command in NOT_RUN:
            print(f"readme_test: not run: '{command}': {NOT_RUN[command]}")
    print(f"readme_test: OK ({len(commands)} fenced commands, "
          f"{len(inline_tool_commands(text))} inline tool commands)")


if __name__ == "__main__":
    main()
