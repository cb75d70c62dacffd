"""Runs one reference tool's command line many times in ONE Python process, as
`python -m MODULE ARGV...` would run each: the tool's heavy imports (torch, transformers) are paid
once instead of once per run (10-20 s apiece on a busy machine).

Usage: python many_runs.py < spec.json > exit_codes.json
spec: {"module": "vllm.entrypoints.cli.main", "runs": [{"argv": [...], "env": {NAME: VALUE},
       "cwd": DIR or null, "stdout": FILE, "stderr": FILE}...]}
Also imported (`run_all`) by launchers that prepare something first (vllm_hf_serve.py).

Each run is `runpy.run_module(MODULE, run_name="__main__")`, the very code `python -m` runs,
with sys.argv = [MODULE's file, *argv]; its file descriptors 1 and 2 sent to the run's files
(so print, logging's stream handlers and C extensions all land there); its exit status
(SystemExit's code; 1, with the traceback on its stderr, for an exception escaping the module;
else 0) is printed, one per run, as a JSON list: the only thing on stdout.

What a fresh process would have and a second run in this one would not, and how it is reset
around each run:
- the environment and working directory: each run's "env" is set on top of the launcher's own
  and "cwd" entered; both are put back afterwards (code reads them at call time: SGLang's
  dataset cache under Path.home(), vLLM's and SGLang's API keys);
- the random generators: `random` and numpy's global one are re-seeded from the OS, as at a
  process start; the tools seed them themselves from --seed where a run asks for it;
- argparse: nothing to reset, as both tools build their parser inside main on each call (so a
  default drawn at parser build, vLLM's --request-id-prefix, is drawn again); module globals the
  tools assign from the parsed arguments (SGLang's `args`) are assigned again by each run;
- memoized functions (`functools.lru_cache`) in the tool's own modules are cleared, so no run
  reads a value cached for an earlier run's tokenizer or file;
- logging: loggers' handlers and levels are put back as they were before the run, so a handler
  a run adds does not print into the next run's files, twice.
That is enough for these two clients: each run builds its own client session, event loop
(asyncio.run), tokenizer and dataset from its arguments, and writes only to its own files.
A run that needs the process itself (its own signals, a console, os._exit) does not belong here.
"""

import functools
import json
import logging
import os
import random
import runpy
import sys
import traceback


def _loggers():
    manager = logging.Logger.manager
    named = [l for l in manager.loggerDict.values() if isinstance(l, logging.Logger)]
    return [logging.getLogger(), *named]


def _clear_caches(package):
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == package or name.startswith(package + ".")):
            continue
        for value in list(vars(mod).values()):
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()


def _reseed():
    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(None)


def run_one(module, run):
    """One run, as `python -m module *run["argv"]` with run's env and cwd; its exit status."""
    _reseed()
    _clear_caches(module.split(".")[0])
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_logging = [(l, list(l.handlers), l.level) for l in _loggers()]
    saved_argv = sys.argv
    os.environ.update(run.get("env") or {})
    if run.get("cwd"):
        os.chdir(run["cwd"])
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    out = os.open(run["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(run["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    code = 0
    try:
        sys.argv = [module, *run["argv"]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)  # as Python prints sys.exit("message")
    except BaseException:  # noqa: BLE001 - an escaping exception is Python's exit status 1
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (out, err, *saved):
            os.close(fd)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        before = {id(l) for l, _, _ in saved_logging}
        for logger, handlers, level in saved_logging:
            logger.handlers[:] = handlers
            logger.setLevel(level)
        for logger in _loggers():
            if id(logger) not in before:
                logger.handlers.clear()
    return code


def run_all(module, runs):
    """Every run in turn; their exit statuses."""
    return [run_one(module, run) for run in runs]


def main():
    spec = json.load(sys.stdin)
    # The answer alone on stdout: whatever else is printed outside a run goes to stderr.
    answer = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    json.dump(run_all(spec["module"], spec["runs"]), answer)
    answer.close()


if __name__ == "__main__":
    main()
