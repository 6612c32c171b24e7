"""Shared grader for repository-repair tasks: run the hidden unittest files next to this script
against the repository in the current directory; reward 1 only if every hidden test passes.
Prints one JSON line: {"reward": float, "breakdown": {test id: 0 or 1}}."""

import json
import os
import sys
import unittest

GRADER = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.getcwd())
sys.dont_write_bytecode = True


def main():
    loader = unittest.TestLoader()
    suite = loader.discover(GRADER, pattern="hidden_test_*.py", top_level_dir=GRADER)
    outcomes = {}

    class Recorder(unittest.TextTestResult):
        def addSuccess(self, test):
            super().addSuccess(test)
            outcomes[test.id()] = 1.0

        def addFailure(self, test, err):
            super().addFailure(test, err)
            outcomes[test.id()] = 0.0

        def addError(self, test, err):
            super().addError(test, err)
            outcomes[getattr(test, "id", lambda: str(test))()] = 0.0

    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=1, resultclass=Recorder)
    result = runner.run(suite)
    total = result.testsRun
    passed = result.wasSuccessful() and total > 0
    print(json.dumps({"reward": 1.0 if passed else 0.0, "breakdown": outcomes}))


if __name__ == "__main__":
    main()
