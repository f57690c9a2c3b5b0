"""Learning-rate schedules over an optimizer's ``param_groups`` (PyTorch's
``torch.optim.lr_scheduler``): ``StepLR``."""

from __future__ import annotations

from collections.abc import Mapping

from gpumat.optim.optimizer import Optimizer, check_rate

__all__ = ["LRScheduler", "StepLR"]


class LRScheduler:
    """Base class: sets each group's ``"lr"`` from the epoch count ``last_epoch`` on
    :meth:`step` (called once per epoch, after the optimizer's steps). Construction performs the
    first step (``last_epoch`` 0: the initial rates, remembered as ``initial_lr``), as PyTorch's.

    Raises:
        TypeError: ``optimizer`` is not a gpumat optimizer. ValueError: ``last_epoch`` < -1, or
            a resumed schedule (``last_epoch`` >= 0) whose groups lack ``initial_lr``.
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"{type(self).__name__}: expected a gpumat optimizer, got "
                f"{type(optimizer).__name__}"
            )
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise ValueError(f"{type(self).__name__}: last_epoch must be an int >= -1")
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise ValueError(
                    f"{type(self).__name__}: param 'initial_lr' is not specified in the "
                    "optimizer's groups when resuming"
                )
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self) -> list:
        """The rates for the current ``last_epoch`` (subclasses define it)."""
        raise NotImplementedError

    def step(self) -> None:
        """Advance one epoch and set the groups' rates."""
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = check_rate(type(self).__name__, "learning rate", lr)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list:
        """The rates the last :meth:`step` set."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Everything but the optimizer: enough to resume the schedule."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore a :meth:`state_dict` (TypeError for a non-mapping)."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"load_state_dict: expected a dict, got {type(state_dict).__name__}")
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    """Multiply each group's rate by ``gamma`` every ``step_size`` epochs: lr = initial_lr *
    gamma ** (epoch // step_size), computed as PyTorch does, by multiplying the current rate at
    each boundary (so the rates equal PyTorch's bit for bit).

    Args:
        optimizer: a gpumat optimizer.
        step_size: epochs between decays, an int >= 1.
        gamma: the factor, a finite number >= 0 (default 0.1).
        last_epoch: -1 to start.

    Raises:
        ValueError: ``step_size`` < 1, ``gamma`` negative or not finite; as for
            :class:`LRScheduler`.
    """

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        if isinstance(step_size, bool) or not isinstance(step_size, int) or step_size < 1:
            raise ValueError(f"StepLR: step_size must be an int >= 1, got {step_size!r}")
        self.step_size = step_size
        self.gamma = check_rate("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma for g in groups]
