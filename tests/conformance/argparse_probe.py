"""Asks a reference tool's own argument parser whether it accepts each of several command lines.

Usage: python argparse_probe.py PROBES_JSON MODULE ARG...
PROBES_JSON is a file holding a JSON list of argument lists. For each, runs MODULE as
`python -m MODULE ARG... <probe>` would, but stops as soon as the tool's outermost
`parse_args` returns (nothing is sent anywhere) or its parser reports an error. Prints one JSON
list, one entry per probe, in order: {"ok": {dest: value, ...}} with the parsed namespace (values
as JSON, strings for what JSON cannot hold), or {"error": "the parser's message"}.

The tool is imported and its module run once, with the first probe: that builds its parsers as
`python -m MODULE ARG...` builds them. Every later probe is asked of the same outermost parser
(`parse_args(ARG... + probe)`, the words the tool would read from sys.argv), so no probe pays
for building them again (vLLM's CLI builds every subcommand's parser: some 60 ms a probe). The
parsers depend on sys.argv only through ARG..., the same for every probe.
"""

import argparse
import json
import runpy
import sys

# The same JSON form of a parsed value as the flag dump (this script's folder is first on the
# path when Python runs it).
from argparse_dump import as_json


class Parsed(Exception):
    pass


class Refused(Exception):
    pass


def main():
    probes_path, module, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(probes_path) as f:
        probes = json.load(f)
    original = argparse.ArgumentParser.parse_args
    depth = [0]

    # The tool's outermost parser: the one whose `parse_args` the tool called, as seen by the
    # first call of the original (after a subclass's own `parse_args` rewrote the words).
    outer = []

    def parse_args(self, args=None, namespace=None):
        # Subclasses (vLLM's FlexibleArgumentParser) rewrite the arguments, then call this.
        depth[0] += 1
        try:
            ns = original(self, args, namespace)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            raise Parsed(ns)
        return ns

    def first_parse(self, args=None, namespace=None):
        if not outer:
            outer.append(self)
        return parse_args(self, args, namespace)

    def error(self, message):
        raise Refused(message)

    argparse.ArgumentParser.parse_args = first_parse
    argparse.ArgumentParser.error = error
    # Whatever the tool prints goes to stderr, so stdout holds the JSON alone.
    sys.stdout = sys.stderr
    answers = []
    for probe in probes:
        sys.argv = [module] + rest + probe
        try:
            if outer:
                # A subclass's `parse_args` (vLLM's rewrite) runs first, as when the tool
                # calls it.
                type(outer[0]).parse_args(outer[0], rest + probe)
            else:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            answers.append({"error": "the tool ran without parsing its arguments"})
        except Parsed as p:
            answers.append({"ok": {k: as_json(v) for k, v in vars(p.args[0]).items()}})
        except Refused as r:
            answers.append({"error": str(r.args[0])})
        except SystemExit as e:
            answers.append({"error": f"exit {e.code}"})
    json.dump(answers, sys.__stdout__)
    sys.__stdout__.write("\n")
    sys.__stdout__.flush()


if __name__ == "__main__":
    main()
