"""The file_editor tool. Runs INSIDE the sandbox (python3 -I -S, standard library only).

Usage: file_editor.py PAYLOAD.json (or :func:`handle` in the tool server), where the payload holds the tool arguments plus "root" (the
workspace mount path, against which relative paths resolve). Prints the result; exits 1 on error.
Undo history lives in the sandbox's private /tmp, so it lasts as long as the episode's shell.
"""

import json
import os
import sys

try:
    from _sha1 import sha1  # the interpreter's own: hashlib loads OpenSSL (4 ms at the server's first call)
except ImportError:
    from hashlib import sha1

HISTORY = "/tmp/.harness_file_history"
SNIPPET_LINES = 4
MAX_VIEW_CHARS = 100_000


class ToolError(Exception):
    pass


def numbered(text, start=1):
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(text.split("\n"), start))


def read(path):
    if not os.path.exists(path):
        raise ToolError(f"The path {path} does not exist.")
    if os.path.isdir(path):
        raise ToolError(f"{path} is a directory; this operation needs a file.")
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def history_dir(path):
    return os.path.join(HISTORY, sha1(path.encode()).hexdigest())


def remember(path, old):
    folder = history_dir(path)
    os.makedirs(folder, exist_ok=True)
    index = len(os.listdir(folder))
    with open(os.path.join(folder, f"{index:06d}"), "w", encoding="utf-8") as handle:
        handle.write(old)


def write(path, text, old=None):
    if old is not None:
        remember(path, old)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def snippet(text, line, extra):
    lines = text.split("\n")
    start = max(line - SNIPPET_LINES, 0)
    end = min(line + extra + SNIPPET_LINES, len(lines))
    return numbered("\n".join(lines[start:end]), start + 1)


def view(path, view_range):
    if os.path.isdir(path):
        if view_range:
            raise ToolError("view_range applies to files, not directories.")
        entries = []
        for current, dirs, files in os.walk(path):
            depth = current[len(path) :].count(os.sep)
            dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < 1 else []
            for name in sorted(dirs) + sorted(f for f in files if not f.startswith(".")):
                entries.append(os.path.join(current, name))
        listing = "\n".join(sorted(entries))
        return f"Files and directories up to 2 levels deep in {path}, excluding hidden items:\n{listing}"
    text = read(path)
    lines = text.split("\n")
    start, end = 1, len(lines)
    if view_range:
        start, end = view_range
        if end == -1:
            end = len(lines)
        if not 1 <= start <= len(lines) or end < start or end > len(lines):
            raise ToolError(
                f"Invalid view_range {view_range}: the file has {len(lines)} lines; "
                "use [start, end] with 1 <= start <= end <= number of lines, or end = -1."
            )
    body = numbered("\n".join(lines[start - 1 : end]), start)
    if len(body) > MAX_VIEW_CHARS:
        body = body[:MAX_VIEW_CHARS] + "\n<response clipped: use view_range to see the rest>"
    return f"Here's the result of running `cat -n` on {path}:\n{body}"


def create(path, file_text):
    if file_text is None:
        raise ToolError("Parameter `file_text` is required for command: create.")
    if os.path.exists(path):
        raise ToolError(
            f"File already exists at: {path}. Cannot overwrite files using command `create`; use str_replace."
        )
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    write(path, file_text)
    return f"File created successfully at: {path}"


def str_replace(path, old_str, new_str):
    if old_str is None:
        raise ToolError("Parameter `old_str` is required for command: str_replace.")
    if old_str == "":
        raise ToolError("Parameter `old_str` must not be empty.")
    text = read(path)
    count = text.count(old_str)
    if count == 0:
        raise ToolError(f"No replacement was performed: old_str `{old_str}` did not appear verbatim in {path}.")
    if count > 1:
        lines = [i + 1 for i, line in enumerate(text.split("\n")) if old_str.split("\n")[0] in line]
        raise ToolError(
            f"No replacement was performed: old_str `{old_str}` occurs {count} times in {path} "
            f"(lines {lines}). Include more context to make it unique."
        )
    new_str = new_str or ""
    new_text = text.replace(old_str, new_str)
    write(path, new_text, old=text)
    line = text.split(old_str)[0].count("\n")
    return (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n"
        f"{snippet(new_text, line, new_str.count(chr(10)))}\nReview the changes and make sure they are as expected."
    )


def insert(path, insert_line, new_str):
    if insert_line is None:
        raise ToolError("Parameter `insert_line` is required for command: insert.")
    if new_str is None:
        raise ToolError("Parameter `new_str` is required for command: insert.")
    text = read(path)
    lines = text.split("\n")
    if not 0 <= insert_line <= len(lines):
        raise ToolError(f"Invalid insert_line {insert_line}: it must be between 0 and {len(lines)}.")
    new_lines = lines[:insert_line] + new_str.split("\n") + lines[insert_line:]
    new_text = "\n".join(new_lines)
    write(path, new_text, old=text)
    return (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n"
        f"{snippet(new_text, insert_line, new_str.count(chr(10)))}\nReview the changes and make sure they are as expected."
    )


def undo_edit(path):
    folder = history_dir(path)
    versions = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    if not versions:
        raise ToolError(f"No edit history found for {path}.")
    last = os.path.join(folder, versions[-1])
    with open(last, encoding="utf-8") as handle:
        old = handle.read()
    os.remove(last)
    write(path, old)
    return f"Last edit to {path} undone successfully. Here's the result of running `cat -n` on {path}:\n{numbered(old)}"


def dispatch(args):
    root = args.get("root") or os.getcwd()
    path = os.path.normpath(os.path.join(root, args["path"]))
    command = args["command"]
    if command == "view":
        return view(path, args.get("view_range"))
    if command == "create":
        return create(path, args.get("file_text"))
    if command == "str_replace":
        return str_replace(path, args.get("old_str"), args.get("new_str"))
    if command == "insert":
        return insert(path, args.get("insert_line"), args.get("new_str"))
    if command == "undo_edit":
        return undo_edit(path)
    raise ToolError(f"Unknown command {command!r}: use view, create, str_replace, insert or undo_edit.")


def handle(args):
    """Run one editor call; returns (text, exit status). Used by the script and by the tool server."""
    try:
        return dispatch(args) + "\n", 0
    except ToolError as error:
        return f"Error: {error}\n", 1
    except OSError as error:
        return f"Error: {error.strerror or error} ({getattr(error, 'filename', '') or ''})\n", 1


def main():
    with open(sys.argv[1], encoding="utf-8") as handle_:
        args = json.load(handle_)
    text, status = handle(args)
    sys.stdout.write(text)
    sys.exit(status)


if __name__ == "__main__":
    main()
