"""The harness tool library. Runs INSIDE the sandbox (python3 -I -S, standard library only).

Usage: library.py PAYLOAD.json (or :func:`handle` in the tool server) with {"op": name, "args": {...}, "root": workspace mount path}.
Prints the result; exits 1 on a tool error. Each op is one tool; tools are our own design:
the HarnessAdapt-style library (read_file, edit_file, view_diff, restore_file, run_check,
delivery_evidence, search) and imitations of two external harnesses' conventions (cc_*: Claude
Code style, oc_*: OpenClaw style). State lives in the sandbox's private /tmp.
"""

import difflib
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time

# the starting workspace: the read-only layer under a copy-on-write workspace, else a copy in /tmp
ORIGINAL = "/.harness/original"
SNAPSHOT = ORIGINAL if os.path.isdir(ORIGINAL) else "/tmp/.harness_snapshot"
STATE = "/tmp/.harness_state.json"
SKIP_DIRS = {".git", "__pycache__", ".harness_context", "node_modules", ".pytest_cache", ".mypy_cache"}
CHECK_CAP_S = 45


class ToolError(Exception):
    pass


# ----------------------------------------------------------------------------- helpers


def resolve(root, path):
    if not isinstance(path, str) or not path:
        raise ToolError("a non-empty path is required")
    return os.path.normpath(os.path.join(root, path))


def read_text(path):
    if not os.path.exists(path):
        raise ToolError(f"File does not exist: {path}")
    if os.path.isdir(path):
        raise ToolError(f"{path} is a directory, not a file")
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def write_text(path, text):
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def load_state():
    try:
        with open(STATE) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def save_state(**changes):
    state = load_state()
    state.update(changes)
    with open(STATE, "w") as handle:
        json.dump(state, handle)


def walk_files(base):
    for current, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                yield os.path.join(current, name)


def numbered(lines, start):
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(lines, start))


def unique_replace(text, old, new, path, replace_all=False):
    if old == "":
        raise ToolError("the text to replace must not be empty")
    count = text.count(old)
    if count == 0:
        raise ToolError(f"the text to replace was not found in {path}; it must match exactly, whitespace included")
    if count > 1 and not replace_all:
        first = old.split("\n")[0]
        lines = [i + 1 for i, line in enumerate(text.split("\n")) if first in line]
        raise ToolError(
            f"the text to replace occurs {count} times in {path} (lines {lines}); add context to make it unique"
        )
    return text.replace(old, new), count


def changed_files(root):
    """Paths (relative) that differ from the episode's starting snapshot."""
    if not os.path.isdir(SNAPSHOT):
        return []
    seen, changed = set(), []
    for full in walk_files(root):
        rel = os.path.relpath(full, root)
        seen.add(rel)
        before = os.path.join(SNAPSHOT, rel)
        if not os.path.exists(before) or _bytes(before) != _bytes(full):
            changed.append(rel)
    for full in walk_files(SNAPSHOT):
        rel = os.path.relpath(full, SNAPSHOT)
        if rel not in seen:
            changed.append(rel)
    return sorted(changed)


def _bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


# ----------------------------------------------------------------------------- HarnessAdapt-style library


def op_snapshot(root, args):
    if SNAPSHOT == ORIGINAL:
        return "snapshot: the starting workspace is mounted read-only"
    shutil.rmtree(SNAPSHOT, ignore_errors=True)
    shutil.copytree(root, SNAPSHOT, symlinks=True, ignore=shutil.ignore_patterns(*SKIP_DIRS))
    return "snapshot taken"


def op_read_file(root, args):
    path = resolve(root, args.get("path"))
    lines = read_text(path).split("\n")
    start = int(args.get("start_line") or 1)
    end = int(args.get("end_line") or min(len(lines), start + 399))
    if start < 1 or start > len(lines) or end < start:
        raise ToolError(f"invalid line range {start}-{end}: {path} has {len(lines)} lines")
    end = min(end, len(lines))
    note = f"\n[lines {start}-{end} of {len(lines)}]" if (start, end) != (1, len(lines)) else ""
    return numbered(lines[start - 1 : end], start) + note


def op_edit_file(root, args):
    path = resolve(root, args.get("path"))
    text = read_text(path)
    new_text, _ = unique_replace(text, args.get("old_text", ""), args.get("new_text", ""), path)
    write_text(path, new_text)
    save_state(last_edit=time.time())
    line = text.split(args["old_text"])[0].count("\n") + 1
    shown = new_text.split("\n")[max(line - 3, 0) : line + args.get("new_text", "").count("\n") + 3]
    return f"Edited {path}.\n" + numbered(shown, max(line - 2, 1))


def op_view_diff(root, args):
    if not os.path.isdir(SNAPSHOT):
        raise ToolError("no starting snapshot is available in this episode")
    only = args.get("path")
    chunks = []
    for rel in changed_files(root):
        if only and os.path.normpath(os.path.join(root, rel)) != resolve(root, only):
            continue
        before_path, after_path = os.path.join(SNAPSHOT, rel), os.path.join(root, rel)
        before = read_text(before_path).splitlines(True) if os.path.exists(before_path) else []
        after = read_text(after_path).splitlines(True) if os.path.exists(after_path) else []
        old_name = f"a/{rel}" if os.path.exists(before_path) else "/dev/null"
        new_name = f"b/{rel}" if os.path.exists(after_path) else "/dev/null"
        chunks.append("".join(difflib.unified_diff(before, after, old_name, new_name)))
    return "".join(chunks) or "No changes since the start of the episode."


def op_restore_file(root, args):
    path = resolve(root, args.get("path"))
    rel = os.path.relpath(path, root)
    original = os.path.join(SNAPSHOT, rel)
    if os.path.exists(original):
        shutil.copy2(original, path)
        return f"Restored {path} to its state at the start of the episode."
    if os.path.exists(path):
        os.remove(path)
        return f"Removed {path}: it did not exist at the start of the episode."
    raise ToolError(f"{path} neither exists nor existed at the start of the episode")


def _symbols(path):
    try:
        text = read_text(path)
    except ToolError:
        return set()
    return set(re.findall(r"^\s*(?:def|class)\s+([A-Za-z_]\w*)", text, re.MULTILINE))


def select_tests(root, changed, limit=5):
    """Score test files: filename matches a changed module +3, same directory +1, references a
    symbol defined in a changed file +2. Returns [(score, path)] best first."""
    tests = [f for f in walk_files(root) if re.match(r"(test_.*|.*_test)\.py$", os.path.basename(f))]
    modules = [
        (
            os.path.splitext(os.path.basename(c))[0],
            os.path.dirname(os.path.join(root, c)),
            _symbols(os.path.join(root, c)),
        )
        for c in changed
        if c.endswith(".py") and not re.match(r"(test_.*|.*_test)\.py$", os.path.basename(c))
    ]
    scored = []
    for test in tests:
        text = None
        score = 0
        for name, folder, symbols in modules:
            base = os.path.basename(test)
            if name and name in base:
                score += 3
            if os.path.dirname(test) == folder:
                score += 1
            if symbols:
                text = text if text is not None else read_text(test)
                if any(re.search(r"\b" + re.escape(s) + r"\b", text) for s in symbols):
                    score += 2
        scored.append((score, test))
    scored.sort(key=lambda item: (-item[0], item[1]))
    picked = [item for item in scored if item[0] > 0][:limit]
    return picked or scored[:limit]


def _runner(root, tests):
    if os.path.exists(os.path.join(root, "runtests.py")):
        return [sys.executable, "runtests.py"]
    if os.path.exists(os.path.join(root, "bin", "test")):
        return [os.path.join(root, "bin", "test")]
    probe = subprocess.run([sys.executable, "-c", "import pytest"], capture_output=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "pytest", "-q", "-x", *tests]
    modules = [os.path.relpath(t, root)[:-3].replace(os.sep, ".") for t in tests]
    return [sys.executable, "-m", "unittest", *modules]


def op_run_check(root, args):
    changed = changed_files(root)
    paths = args.get("paths")
    if paths:
        tests = [resolve(root, p) for p in paths]
        ranking = "given by the caller"
    else:
        picked = select_tests(root, changed)
        tests = [t for _, t in picked]
        ranking = ", ".join(f"{os.path.relpath(t, root)} (score {s})" for s, t in picked) or "none found"
    command = _runner(root, tests)
    timeout = min(float(args.get("timeout") or CHECK_CAP_S), CHECK_CAP_S)
    try:
        run = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout)
        output, status = (run.stdout + run.stderr)[-6000:], run.returncode
    except subprocess.TimeoutExpired as exc:  # its partial output is bytes even in text mode
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        output, status = f"{partial[-3000:]}\n[run_check stopped after {timeout:g} s]", -1
    save_state(last_check=time.time(), last_check_status=status, last_check_command=" ".join(command))
    verdict = "PASSED" if status == 0 else "FAILED"
    return f"Selected tests: {ranking}\nCommand: {' '.join(command)}\nResult: {verdict} (exit {status})\n{output}"


def op_delivery_evidence(root, args):
    state = load_state()
    changed = changed_files(root)
    lines = ["Changed files: " + (", ".join(changed) if changed else "none")]
    if "last_check" in state:
        fresh = state["last_check"] >= state.get("last_edit", 0)
        lines.append(
            f"Last check: {'passed' if state['last_check_status'] == 0 else 'failed'} "
            f"({state['last_check_command']}); {'after' if fresh else 'BEFORE'} the last edit made with the editing tools"
        )
    else:
        lines.append("Last check: none run in this episode")
    return "\n".join(lines)


def op_search(root, args):
    pattern = args.get("pattern")
    try:
        regex = re.compile(pattern)
    except (re.error, TypeError) as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    base = resolve(root, args.get("path") or ".")
    glob = args.get("glob")
    limit = int(args.get("max_results") or 50)
    hits = []
    files = [base] if os.path.isfile(base) else walk_files(base)
    for path in files:
        if glob and not fnmatch.fnmatch(os.path.basename(path), glob):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    if regex.search(line):
                        hits.append(f"{os.path.relpath(path, root)}:{number}: {line.rstrip()[:200]}")
                        if len(hits) >= limit:
                            return "\n".join(hits) + f"\n[stopped at {limit} matches]"
        except (UnicodeDecodeError, OSError):
            continue
    return "\n".join(hits) or "No matches."


# ----------------------------------------------------------------------------- Claude Code style (imitation)


def op_cc_read(root, args):
    path = resolve(root, args.get("file_path"))
    lines = read_text(path).split("\n")
    offset = int(args.get("offset") or 1)
    limit = int(args.get("limit") or 2000)
    chosen = [line if len(line) <= 2000 else line[:2000] + "…" for line in lines[offset - 1 : offset - 1 + limit]]
    return "\n".join(f"{i:>6}\u2192{line}" for i, line in enumerate(chosen, offset))


def op_cc_edit(root, args):
    path = resolve(root, args.get("file_path"))
    text = read_text(path)
    if args.get("old_string") == args.get("new_string"):
        raise ToolError("old_string and new_string are exactly the same")
    new_text, count = unique_replace(
        text, args.get("old_string", ""), args.get("new_string", ""), path, bool(args.get("replace_all"))
    )
    write_text(path, new_text)
    save_state(last_edit=time.time())
    return f"The file {path} has been updated." + (f" All {count} occurrences were replaced." if count > 1 else "")


def op_cc_write(root, args):
    path = resolve(root, args.get("file_path"))
    existed = os.path.exists(path)
    write_text(path, args.get("content", ""))
    save_state(last_edit=time.time())
    return f"The file {path} has been updated." if existed else f"File created successfully at: {path}"


def op_cc_glob(root, args):
    base = resolve(root, args.get("path") or ".")
    pattern = args.get("pattern", "*")
    matches = [
        f
        for f in walk_files(base)
        if fnmatch.fnmatch(os.path.relpath(f, base), pattern) or fnmatch.fnmatch(os.path.basename(f), pattern)
    ]
    matches.sort(key=lambda f: -os.path.getmtime(f))
    return "\n".join(matches[:100]) or "No files found"


def op_cc_grep(root, args):
    flags = re.IGNORECASE if args.get("-i") else 0
    try:
        regex = re.compile(args.get("pattern", ""), flags)
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from None
    base = resolve(root, args.get("path") or ".")
    mode = args.get("output_mode") or "files_with_matches"
    before = int(args.get("-B") or args.get("-C") or 0)
    after = int(args.get("-A") or args.get("-C") or 0)
    out, counts = [], {}
    files = [base] if os.path.isfile(base) else walk_files(base)
    for path in files:
        if args.get("glob") and not fnmatch.fnmatch(os.path.basename(path), args["glob"]):
            continue
        try:
            lines = read_text(path).split("\n")
        except ToolError:
            continue
        hits = [i for i, line in enumerate(lines) if regex.search(line)]
        if not hits:
            continue
        counts[path] = len(hits)
        if mode == "content":
            shown = sorted({j for i in hits for j in range(max(i - before, 0), min(i + after + 1, len(lines)))})
            for j in shown:
                prefix = f"{path}:{j + 1}:" if args.get("-n") else f"{path}:"
                out.append(prefix + lines[j])
    if mode == "count":
        return "\n".join(f"{p}:{c}" for p, c in counts.items()) or "No matches found"
    if mode == "content":
        return "\n".join(out) or "No matches found"
    return (f"Found {len(counts)} files\n" + "\n".join(counts)) if counts else "No files found"


def op_cc_todo(root, args):
    todos = args.get("todos") or []
    save_state(todos=todos)
    return (
        "Todos have been modified successfully. Ensure that you continue to use the todo list to track your progress."
    )


# ----------------------------------------------------------------------------- OpenClaw style (imitation)


def op_oc_read(root, args):
    path = resolve(root, args.get("path"))
    lines = read_text(path).split("\n")
    offset = int(args.get("offset") or 1)
    limit = int(args.get("limit") or 200)
    end = min(offset - 1 + limit, len(lines))
    body = "\n".join(lines[offset - 1 : end])
    if end < len(lines) or offset > 1:
        body += f"\n\n[Showing lines {offset}-{end} of {len(lines)}. Use offset={end + 1} to continue.]"
    return body


def op_oc_write(root, args):
    path = resolve(root, args.get("path"))
    content = args.get("content", "")
    write_text(path, content)
    save_state(last_edit=time.time())
    return f"Successfully wrote {len(content.encode())} bytes to {path}"


def op_oc_edit(root, args):
    path = resolve(root, args.get("path"))
    text = read_text(path)
    new_text, _ = unique_replace(text, args.get("oldText", ""), args.get("newText", ""), path)
    write_text(path, new_text)
    save_state(last_edit=time.time())
    return f"Successfully replaced text in {path}."


def op_oc_apply_patch(root, args):
    patch = args.get("patch") or args.get("input") or ""
    if not patch.strip():
        raise ToolError("the patch is empty")
    run = subprocess.run(
        ["patch", "-p1", "--forward", "--batch"], cwd=root, input=patch, capture_output=True, text=True
    )
    if run.returncode != 0:
        raise ToolError("the patch did not apply:\n" + (run.stdout + run.stderr)[-3000:])
    save_state(last_edit=time.time())
    return "Patch applied.\n" + run.stdout[-3000:]


def op_oc_process(root, args):
    action = args.get("action", "list")
    if action == "list":
        run = subprocess.run(["ps", "-eo", "pid,etime,args"], capture_output=True, text=True)
        return run.stdout[-6000:]
    if action == "kill":
        pid = int(args.get("pid") or 0)
        if pid <= 1:
            raise ToolError("give the pid of a process to kill")
        os.kill(pid, 9)
        return f"Killed process {pid}."
    raise ToolError(f"unknown action {action!r}: use list or kill")


OPS = {name[3:]: function for name, function in dict(globals()).items() if name.startswith("op_")}


def handle(payload):
    """Run one library call; returns (text, exit status). Used by the script and by the tool server."""
    try:
        op = payload.get("op")
        if op not in OPS:
            raise ToolError(f"unknown library tool {op!r}")
        return OPS[op](payload.get("root") or os.getcwd(), payload.get("args") or {}) + "\n", 0
    except (ToolError, OSError) as error:
        return f"Error: {error}\n", 1


def main():
    with open(sys.argv[1], encoding="utf-8") as handle_:
        payload = json.load(handle_)
    text, status = handle(payload)
    sys.stdout.write(text)
    sys.exit(status)


if __name__ == "__main__":
    main()
