"""Prints a reference tool's command-line flags as JSON, read from its own argument parser.

Usage: python argparse_dump.py MODULE ARG... --help
Runs MODULE as `python -m MODULE ARG... --help` would, but when argparse is about to print the
help of the innermost parser (the one `--help` belongs to, a subcommand's for `bench serve`), it
prints that parser's actions instead and exits 0. Nothing of the tool is copied: the flags are
read from the tool as installed. One JSON object per flag, in the parser's order:
  flags: option strings, longest first        dest: the attribute it sets
  kind: store | store_true | store_false | store_const | append | boolean_optional | count | other
  default: the default as JSON (null for None; strings for what JSON cannot hold, e.g. inf)
  type: the type's name (int, float, str, loads, a lambda's "<lambda>") or null
  nargs: null, a number, or "?", "*", "+"     choices: a list of strings (a set's sorted), or null
  required: whether the parser requires it
"""

import argparse
import json
import math
import runpy
import sys

KINDS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_CountAction": "count",
    "BooleanOptionalAction": "boolean_optional",
}


def as_json(value):
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return str(value)


def choices(cs):
    if cs is None:
        return None
    # A set's order changes from one Python process to the next: sorted, it compares equal.
    if isinstance(cs, (set, frozenset)):
        return sorted(str(c) for c in cs)
    return [str(c) for c in cs]


def kind(action):
    if isinstance(action, argparse.BooleanOptionalAction):
        return "boolean_optional"
    return KINDS.get(type(action).__name__, "other")


def describe(action):
    t = action.type
    return {
        "flags": sorted(action.option_strings, key=len, reverse=True),
        "dest": action.dest,
        "kind": kind(action),
        "default": as_json(action.default),
        "type": getattr(t, "__name__", str(t)) if t is not None else None,
        "nargs": action.nargs,
        "choices": choices(action.choices),
        "required": bool(action.required),
    }


def dump(parser, *_args, **_kwargs):
    flags = [
        describe(a)
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction)
    ]
    json.dump(flags, sys.__stdout__, indent=1)
    sys.__stdout__.write("\n")
    sys.__stdout__.flush()
    raise SystemExit(0)


def main():
    module, rest = sys.argv[1], sys.argv[2:]
    argparse.ArgumentParser.print_help = dump
    sys.argv = [module] + rest
    # Whatever the tool prints while importing goes to stderr, so stdout holds the JSON alone.
    sys.stdout = sys.stderr
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.exit("the tool exited without printing its help: is --help the last argument?")


if __name__ == "__main__":
    main()
