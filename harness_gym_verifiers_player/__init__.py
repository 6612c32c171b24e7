"""The verifiers harness plugin of harness-gym's player (``--env.player.harness.id
harness-gym-verifiers-player``): verifiers' chat program, run offline with this interpreter.
The code lives in :mod:`harness_gym.integrations.verifiers_player`."""

from harness_gym.integrations.verifiers_player import HarnessPlayer

__all__ = ["HarnessPlayer"]
