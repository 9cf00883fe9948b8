"""Which epoch the next ``iter(loader)`` reads, and from where (R10, specs/resume-state.md).

Pure bookkeeping for ``ShardLoader``: an ``EpochCursor`` remembers how the last iteration
ended and whether the user chose the next epoch since. The rule:

* an iteration that ran to its end → the next one reads the **next epoch**, from its start;
* an iteration that did not (the loop broke out, it raised, or ``iter`` was called again while
  it was held) → the next one **continues the same epoch** at the consumed boundary, exactly as
  if its ``state_dict()`` had been loaded on the same topology: no batch twice, none skipped;
* ``set_epoch(e)`` wins over both: the next iteration reads epoch ``e`` from its start (a
  pending ``load_state_dict`` of epoch ``e`` excepted, L3); ``load_state_dict`` wins too, and so
  does ``StreamingDataset.set_epoch`` called on the dataset directly (trainers do).
"""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    """How the loader's last iteration stands."""

    CHOSEN = "chosen"  # no iteration since the epoch was chosen (construction, set_epoch, load)
    RUNNING = "running"  # started and not closed (still live, or held but no longer iterated)
    ABANDONED = "abandoned"  # closed before its end (the loop broke out, or it raised)
    ENDED = "ended"  # ran to its end


class EpochCursor:
    """The phase of the loader's last iteration; no I/O, no torch. ``generation`` numbers the
    iterations, so that an old iterator closed late does not speak for the current one."""

    def __init__(self) -> None:
        self.phase = Phase.CHOSEN
        self.generation = 0
        self.epoch = 0  # the epoch of the last iteration

    def chosen(self) -> None:
        """The user chose the next iteration (``set_epoch``, ``load_state_dict``): it wins."""
        self.phase = Phase.CHOSEN

    def restored_ended(self, epoch: int) -> None:
        """A loaded state of ``epoch`` has nothing left: it counts as run to its end."""
        self.phase, self.epoch = Phase.ENDED, epoch

    def started(self, generation: int, epoch: int) -> None:
        self.phase, self.generation, self.epoch = Phase.RUNNING, generation, epoch

    def ended(self, generation: int) -> None:
        if generation == self.generation and self.phase is Phase.RUNNING:
            self.phase = Phase.ENDED

    def closed(self, generation: int) -> None:
        """Iteration ``generation``'s iterator was closed; before its end, that abandons it."""
        if generation == self.generation and self.phase is Phase.RUNNING:
            self.phase = Phase.ABANDONED

    @property
    def live(self) -> bool:
        """An iteration is under way (its iterator is open and has not reached its end)."""
        return self.phase is Phase.RUNNING

    def advances(self, epoch: int) -> bool:
        """The next iteration reads the next epoch: the last one ran to its end, and the
        dataset's ``epoch`` was not changed since."""
        return self.phase is Phase.ENDED and epoch == self.epoch

    def continues(self, epoch: int) -> bool:
        """The next iteration continues the current epoch at the consumed boundary."""
        return self.phase in (Phase.RUNNING, Phase.ABANDONED) and epoch == self.epoch
