"""A stand-in for v7's Gluon module (Gluon is not interpreted; on a GPU too), for the launch table's tests: candidates
by label, each launch's O filled with its candidate's number. best_launch times them in label order ("a" first), the
race (fa2triton.queued_timing.queued_ms, replaced by `install`) times "b" fastest. `raced` counts best_launch's calls (the
race's first step), `forwarded` the labels launched untimed."""

from types import SimpleNamespace

import torch

RACE_MS = {"a": 1.0, "b": 0.5, "c": 0.7}


class FakeGluon:
    def __init__(self, labels=("a", "b")):
        self.labels, self.raced, self.forwarded = list(labels), [], []

    def launch(self, label):
        def run(Q, K, V, need_l=True):
            return torch.full_like(Q, float("abc".index(label) + 1)), torch.zeros(Q.shape[:2], device=Q.device)
        run.label = label
        return run

    def candidates_for(self, D):
        return [SimpleNamespace(label=label) for label in self.labels]

    def fitting(self, candidates, D, device=None):
        return list(candidates)

    def best_launch(self, Q, K, V, is_causal):
        self.raced.append(Q.shape[1])
        timed = {label: (1.0 + 0.01 * i, self.launch(label)) for i, label in enumerate(self.labels)}
        first = timed[self.labels[0]][1]
        return (*first(Q, K, V), first, timed)

    def forward(self, Q, K, V, is_causal, cfg):
        self.forwarded.append(cfg.label)
        launch = self.launch(cfg.label)
        return (*launch(Q, K, V), launch)


def install(monkeypatch, v7, labels=("a", "b")) -> FakeGluon:
    """v7's Gluon module replaced by a FakeGluon, the Gluon path taking every input (as on a Hopper GPU), not raced
    against the tl path (RACE_TL off: the interpreter's tl path makes no launch to race), and the race's timing
    replaced by RACE_MS."""
    fake = FakeGluon(labels)
    for name in ("best_launch", "candidates_for", "fitting", "forward"):
        monkeypatch.setattr(v7.GLUON, name, getattr(fake, name))
    monkeypatch.setattr(v7, "gluon_applies", lambda *args: None)
    monkeypatch.setattr(v7.FlashAttentionTriton, "RACE_TL", False)
    monkeypatch.setattr("fa2triton.queued_timing.queued_ms", lambda fn, *a, **kw: RACE_MS[fn.__defaults__[0].label])
    return fake


def label_of(O) -> str:
    """Which fake candidate made O."""
    return "abc"[int(O.flatten()[0].item()) - 1]
