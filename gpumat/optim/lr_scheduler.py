"""Learning-rate schedules over an optimizer's ``param_groups`` (PyTorch's
``torch.optim.lr_scheduler``): ``StepLR``, ``LambdaLR``, ``LinearLR``, ``CosineAnnealingLR``,
``OneCycleLR`` and ``SequentialLR``, each group's rate set by PyTorch's formulas in its order of
operations (so the rates equal PyTorch's bit for bit)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence

from gpumat.optim.optimizer import Optimizer, check_rate

__all__ = [
    "CosineAnnealingLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "OneCycleLR",
    "SequentialLR",
    "StepLR",
]


def _per_group(name: str, what: str, optimizer: Optimizer, value) -> list:
    """``value`` for each group: one value for all, or a list/tuple of one per group."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}: expected {n} values for {what}, got {len(value)}")
        return list(value)
    return [value] * n


def _positive_int(name: str, what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: expected a positive integer {what}, got {value!r}")
    return value


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
        self._initial_step()

    def _initial_step(self) -> None:
        """The construction's step (PyTorch's ``_initial_step``): ``_step_count`` 1 after it."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list:
        """The rates for the current ``last_epoch`` (subclasses define it)."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or, PyTorch's deprecated form, go to ``epoch``, by the closed form
        where the schedule has one) and set the groups' rates."""
        self._step_count += 1
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise ValueError(f"{type(self).__name__}.step: epoch must be an int >= 0")
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        name = type(self).__name__
        values = [check_rate(name, "learning rate", lr) for lr in values]
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
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

    def _get_closed_form_lr(self) -> list:
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch) for each group (PyTorch's ``LambdaLR``).

    Args:
        optimizer: a gpumat optimizer.
        lr_lambda: a function of the epoch count (an int) returning a factor, or a list of one
            per group.
        last_epoch: -1 to start.

    Raises:
        TypeError: lr_lambda not callable. ValueError: a list of the wrong length; a factor
            giving a negative or non-finite rate (at the step); as for :class:`LRScheduler`.
    """

    def __init__(self, optimizer: Optimizer, lr_lambda, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"LambdaLR: expected a gpumat optimizer, got {type(optimizer).__name__}"
            )
        self.lr_lambdas = _per_group("LambdaLR", "lr_lambda", optimizer, lr_lambda)
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError(f"LambdaLR: lr_lambda must be callable, got {type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs, strict=True)]

    def state_dict(self) -> dict:
        """As :meth:`LRScheduler.state_dict`, without the functions (PyTorch keeps only callable
        objects' ``__dict__``; gpumat leaves them out: pass the same lr_lambda again)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}


class LinearLR(LRScheduler):
    """Scale each group's rate by a factor going linearly from ``start_factor`` to
    ``end_factor`` over ``total_iters`` epochs, then constant (PyTorch's ``LinearLR``, with its
    multiplicative update ``lr *= 1 + (end - start) / (total_iters * start + (epoch - 1) *
    (end - start))``).

    Args:
        optimizer: a gpumat optimizer.
        start_factor: in (0, 1] (default 1/3). end_factor: in [0, 1] (default 1).
        total_iters: epochs of the ramp, an int >= 1 (default 5).
        last_epoch: -1 to start.

    Raises:
        ValueError: a factor out of range, total_iters < 1; as for :class:`LRScheduler`.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not (0 < start_factor <= 1):
            raise ValueError(
                "Starting multiplicative factor expected to be greater than 0 and less or equal "
                f"to 1, got {start_factor}"
            )
        if not (0 <= end_factor <= 1):
            raise ValueError(
                f"Ending multiplicative factor expected to be between 0 and 1, got {end_factor}"
            )
        self.start_factor, self.end_factor = float(start_factor), float(end_factor)
        self.total_iters = _positive_int("LinearLR", "total_iters", total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [g["lr"] * self.start_factor for g in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return [g["lr"] for g in groups]
        d = self.end_factor - self.start_factor
        return [
            g["lr"] * (1.0 + d / (self.total_iters * self.start_factor + (self.last_epoch - 1) * d))
            for g in groups
        ]

    def _get_closed_form_lr(self) -> list:
        d = self.end_factor - self.start_factor
        k = min(self.total_iters, self.last_epoch)
        return [b * (self.start_factor + d * k / self.total_iters) for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing (Loshchilov & Hutter, "SGDR", ICLR 2017, without restarts), PyTorch's
    ``CosineAnnealingLR``: lr_t = eta_min + (initial_lr - eta_min) (1 + cos(pi t / T_max)) / 2,
    computed by PyTorch's recursive form (bit for bit its values; past T_max the rate rises
    again, as there).

    Args:
        optimizer: a gpumat optimizer.
        T_max: the half period in epochs, an int >= 1.
        eta_min: the lowest rate, finite and >= 0 (default 0).
        last_epoch: -1 to start.

    Raises:
        ValueError: T_max < 1, eta_min out of range; as for :class:`LRScheduler`.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        T_max: int,
        eta_min: float = 0.0,
        last_epoch: int = -1,  # noqa: N803
    ) -> None:
        self.T_max = _positive_int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = check_rate("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        groups, t, T, eta = self.optimizer.param_groups, self.last_epoch, self.T_max, self.eta_min  # noqa: N806
        if self._is_initial:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and t > 0:
            return [eta + (b - eta) * (1 + math.cos(t * math.pi / T)) / 2 for b in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [
                g["lr"] + (b - eta) * (1 - math.cos(math.pi / T)) / 2
                for b, g in zip(self.base_lrs, groups, strict=True)
            ]
        return [
            (1 + math.cos(math.pi * t / T))
            / (1 + math.cos(math.pi * (t - 1) / T))
            * (g["lr"] - eta)
            + eta
            for g in groups
        ]

    def _get_closed_form_lr(self) -> list:
        eta, t, T = self.eta_min, self.last_epoch, self.T_max  # noqa: N806
        return [eta + (b - eta) * (1 + math.cos(math.pi * t / T)) / 2 for b in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin, "Super-Convergence", 2018), PyTorch's ``OneCycleLR``,
    stepped once per batch: the rate rises from max_lr / div_factor to max_lr over the first
    ``pct_start`` of the steps, then anneals to initial_lr / final_div_factor (``three_phase``:
    back down to the initial rate first, as fast.ai's); with ``cycle_momentum`` the momentum (or
    Adam's beta1) moves the opposite way between ``max_momentum`` and ``base_momentum``.
    Writes ``initial_lr``, ``max_lr``, ``min_lr`` (and ``max_momentum``, ``base_momentum``) into
    each group, as PyTorch does.

    Args:
        optimizer: a gpumat optimizer.
        max_lr: the peak rate, one or one per group.
        total_steps: the steps of the cycle; or ``epochs`` and ``steps_per_epoch`` (ints >= 1).
        pct_start: the rising share of the cycle, a float in [0, 1] (default 0.3).
        anneal_strategy: ``"cos"`` (default) or ``"linear"``.
        cycle_momentum: default True (needs an optimizer with momentum or betas).
        base_momentum, max_momentum: default 0.85 and 0.95 (one or one per group).
        div_factor: initial_lr = max_lr / div_factor (default 25).
        final_div_factor: min_lr = initial_lr / final_div_factor (default 1e4).
        three_phase: the three-phase variant (default False).
        last_epoch: -1 to start.

    Raises:
        ValueError: neither total_steps nor epochs and steps_per_epoch, a non-positive count, a
            pct_start outside [0, 1] or not a float, an unknown anneal_strategy, cycle_momentum
            with an optimizer without momentum or betas, a step beyond total_steps.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum=0.85,
        max_momentum=0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        name = "OneCycleLR"
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: expected a gpumat optimizer, got {type(optimizer).__name__}")
        if total_steps is not None:
            self.total_steps = _positive_int(name, "total_steps", total_steps)
        elif epochs is not None and steps_per_epoch is not None:
            e = _positive_int(name, "epochs", epochs)
            self.total_steps = e * _positive_int(name, "steps_per_epoch", steps_per_epoch)
        else:
            raise ValueError(
                f"{name}: you must define either total_steps OR (epochs AND steps_per_epoch)"
            )
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ValueError(f"{name}: expected float between 0 and 1 pct_start, got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"{name}: anneal_strategy must be one of 'cos' or 'linear', got {anneal_strategy!r}"
            )
        n = self.total_steps
        if three_phase:
            self._schedule_phases = [
                (float(pct_start * n) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (
                    float(2 * pct_start * n) - 2,
                    "max_lr",
                    "initial_lr",
                    "base_momentum",
                    "max_momentum",
                ),
                (n - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._schedule_phases = [
                (float(pct_start * n) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (n - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        self.anneal_strategy = anneal_strategy
        groups = optimizer.param_groups
        max_lrs = _per_group(name, "max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for m, g in zip(max_lrs, groups, strict=True):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    f"{name}: optimizer must support momentum or beta1 with `cycle_momentum` "
                    "option enabled"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            maxs = _per_group(name, "max_momentum", optimizer, max_momentum)
            bases = _per_group(name, "base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for m, b, g in zip(maxs, bases, groups, strict=True):
                    if self.use_beta1:
                        g["betas"] = (m, *g["betas"][1:])
                    else:
                        g["momentum"] = m
                    g["max_momentum"] = m
                    g["base_momentum"] = b
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(
                f"OneCycleLR: tried to step {step} times; the specified number of total steps "
                f"is {self.total_steps}"
            )
        lrs = []
        phases = self._schedule_phases
        for g in self.optimizer.param_groups:
            start_step = 0.0
            for i, (end_step, lr0, lr1, m0, m1) in enumerate(phases):
                if step <= end_step or i == len(phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lr = self._anneal(g[lr0], g[lr1], pct)
                    if self.cycle_momentum:
                        mom = self._anneal(g[m0], g[m1], pct)
                    break
                start_step = end_step
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    g["betas"] = (mom, *g["betas"][1:])
                else:
                    g["momentum"] = mom
        return lrs


class SequentialLR(LRScheduler):
    """Schedules one after another (PyTorch's ``SequentialLR``): ``schedulers[i]`` runs from
    epoch ``milestones[i - 1]`` (restarted there at its epoch 0, by its closed form where it has
    one) until ``milestones[i]``. Typical: a LinearLR warm-up then CosineAnnealingLR.

    Args:
        optimizer: the optimizer every scheduler drives.
        schedulers: a list of schedulers (not SequentialLR... nesting works, as PyTorch's).
        milestones: ascending epochs, one fewer than the schedulers.
        last_epoch: -1 to start.

    Raises:
        TypeError: optimizer not a gpumat optimizer, a scheduler not a scheduler.
        ValueError: no scheduler, a scheduler of another optimizer, a wrong number of
            milestones.
    """

    def __init__(
        self, optimizer: Optimizer, schedulers: Sequence, milestones: Sequence, last_epoch: int = -1
    ) -> None:
        name = "SequentialLR"
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: expected a gpumat optimizer, got {type(optimizer).__name__}")
        schedulers, milestones = list(schedulers), list(milestones)
        if not schedulers:
            raise ValueError(f"{name} expects at least one scheduler")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler):
                raise TypeError(f"{name}: scheduler {i} is a {type(s).__name__}")
            if s.optimizer is not optimizer:
                raise ValueError(
                    f"{name} expects all schedulers to belong to the same optimizer, but "
                    f"scheduler {i} ({type(s).__name__}) has another"
                )
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"{name} expects one more scheduler than milestones, got {len(schedulers)} "
                f"schedulers and {len(milestones)} milestones"
            )
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        self._undo(self)
        idx = bisect_right(milestones, 0)
        schedulers[idx]._initial_step()
        self._last_lr = schedulers[idx].get_last_lr()

    def _undo(self, sched) -> None:
        # Undo the construction step of every (nested) scheduler, as PyTorch's recursive_undo.
        if hasattr(sched, "_schedulers"):
            for s in sched._schedulers:
                self._undo(s)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        """Advance one epoch: the scheduler whose span holds it steps (restarted at a milestone)."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched._update_lr(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    def state_dict(self) -> dict:
        """This schedule's counters and each scheduler's :meth:`~LRScheduler.state_dict`."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        out["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore a :meth:`state_dict` (each scheduler's too)."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"load_state_dict: expected a dict, got {type(state_dict).__name__}")
        state = dict(state_dict)
        subs = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, sd in zip(self._schedulers, subs, strict=True):
            s.load_state_dict(sd)
