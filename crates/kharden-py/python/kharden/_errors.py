"""Errors in the caller's terms: a message about a line of the TOML text made from the
caller's arguments (`run`) or dict (`sweep`) names the argument or the dict's key instead."""

import contextlib
import re

from ._native import KhardenError


def dict_key_of_line(text, line):
    """The key of the dict a line of the TOML made from it (`_native.toml_of_json`) sits
    under: `grid`, `point[1]`, `point[1].workload`; for a table's own header line, the key
    that holds the table (an error about a table names the table itself)."""
    arrays, key = {}, ""
    for n, raw in enumerate(text.splitlines()[:line], 1):
        header = re.fullmatch(r"(\[\[?)(.+?)\]\]?", raw.strip())
        if not header:
            continue
        parts = [p.strip('"') for p in header.group(2).split(".")]
        if header.group(1) == "[[":
            arrays[parts[0]] = arrays.get(parts[0], -1) + 1
        if parts[0] in arrays:
            parts[0] = f"{parts[0]}[{arrays[parts[0]]}]"
        if n == line and header.group(1) == "[":
            parts.pop()
        key = ".".join(parts)
    return key


def at_line(message, place):
    """(line, rest) of `PLACE: line N: rest`, or None."""
    m = re.match(re.escape(place) + r": line (\d+): (.*)$", message, re.S)
    return (int(m.group(1)), m.group(2)) if m else None


@contextlib.contextmanager
def naming_dict_keys(place, text):
    """Re-raises an error about a line of the TOML made from a dict with the dict's key
    instead: `sweep dict: line 11: machine: ...` -> `sweep dict: point[1]: machine: ...`."""
    try:
        yield
    except KhardenError as e:
        at = at_line(str(e), place)
        if not at:
            raise
        key, rest = dict_key_of_line(text, at[0]), at[1]
        # `grid.set` and `set: unknown parameter ...`: the message names the last key
        # (or the whole path: `grid.set.kernel.x: ...`).
        head = rest.split(": ", 1)[0]
        if head == key or head.startswith(key + "."):
            key = ""
        elif key.endswith("." + head):
            key = key[: -len(head) - 1]
        raise KhardenError(f"{place}: {key}: {rest}" if key else f"{place}: {rest}") from None


def run_message(message, options, alone):
    """An error about the point `run` made, naming the argument at fault instead of a line
    of the text: `run: line 3: machine: ...` -> `run: machine: ...`; a workload option by
    its keyword (`run: line 5: workload: syscall: ...` -> `run: syscall: ...`), also where the
    message names no option (`invalid type: string "x", expected u64`): the keyword is then
    the one that `alone(key, value)`, a check of the point with that option only, refuses."""
    at = at_line(message, "run")
    if not at:
        return message
    rest = at[1]
    # `workload: syscall: ...`, `workload: kernel-op: op: ...`: from the keyword on.
    parts = rest.split(": ")
    named = [i for i, p in enumerate(parts[:3]) if i and p in options]
    if parts[0] == "workload" and named:
        rest = ": ".join(parts[named[0]:])
    elif re.match(r"workload: invalid (type|value): ", rest):
        problem = rest[len("workload: "):]
        for key, value in options.items():
            try:
                alone(key, value)
            except KhardenError as e:
                if str(e).endswith(problem):
                    rest = f"{key}: {problem}"
                    break
    return f"run: {rest}"
