"""Write golden loader states, one per kind of dataset, with the continuation the writing
shardkit trains after loading each: ``tests/golden/v1/states/<tag>-<kind>.json``.

    PYTHONPATH=/path/to/an/older/checkout python tools/make_golden_states.py TAG

Run it with an *older* shardkit on the path (``TAG`` names it, e.g. its commit); the golden
test (tests/golden/test_golden_states.py) then checks that today's shardkit loads each state and
trains exactly that continuation. The configurations are ``tests/golden/state_kinds.py``'s,
shared with the test. Tests never regenerate these files.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS_FILE = os.path.join(os.path.dirname(HERE), "tests", "golden", "state_kinds.py")


def _state_kinds() -> object:
    """``tests/golden/state_kinds.py`` of this checkout, by path: the shardkit imported is the
    one on ``PYTHONPATH`` (the older checkout), never this one's."""
    spec = importlib.util.spec_from_file_location("state_kinds", KINDS_FILE)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(KINDS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(tag: str) -> None:
    import shardkit as sk

    kinds: Any = _state_kinds()
    KINDS, OUT, continuation, make_loader = kinds.KINDS, kinds.OUT, kinds.continuation, kinds.make_loader
    for kind, spec in KINDS.items():
        loader = make_loader(sk, kind)
        it = iter(loader)
        for _ in range(spec["steps"]):
            next(it)
        state = json.loads(json.dumps(loader.state_dict()))
        resumed = make_loader(sk, kind)
        resumed.load_state_dict(json.loads(json.dumps(state)))
        record = {"made_by": f"shardkit {tag} ({sk.__file__})", "kind": kind, "state": state,
                  "rest": continuation(resumed, kind)}
        path = os.path.join(OUT, f"{tag}-{kind}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1, sort_keys=True)
            fh.write("\n")
        print(path, len(record["rest"]), "batches after the state")


if __name__ == "__main__":
    main(sys.argv[1])
