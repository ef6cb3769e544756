"""The shared loop driver: SEP and QSGP on it (checkpoint/resume, Ctrl-C, data-parallel),
and ``optimizer_kwargs``.

References: an uninterrupted run with the same seed (resume must reproduce it bit for bit),
a one-process run (two processes must reproduce it up to round-off), and the SAVIGP
context that swaps in the paper's ADADELTA settings by another route.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from small_sets import cls_data, one_torch_thread, reg_data  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.training import distributed as D

pytestmark = pytest.mark.usefixtures("one_torch_thread")






def _sep(scheme="batch"):
    Z = np.stack([np.linspace(-2.5, 2.5, 6), np.linspace(2, -2, 6)], 1)
    return lg.SEP(Z=Z, kernel=lg.kernels.RBF(lengthscale=1.0, variance=1.5), scheme=scheme)


def _qsgp():
    return lg.QSGP(
        num_basis=60,
        basis=lg.QSGP.Basis(batch=20),
        covariance=lg.QSGP.Covariance(kind="chevron", num_dense=3),
        control_variate=10,
    )


def _state(m):
    """Everything a run determines: parameters, buffers, sites / training state, history."""
    out = {f"p.{k}": v.detach().clone() for k, v in m.state_dict().items()}
    for k in ("site_nu", "site_mu", "site_upsilon", "A", "c"):
        if getattr(m, k, None) is not None:
            out[k] = getattr(m, k).clone()
    st = m.training_state().get("train_state") if isinstance(m, lg.QSGP) else None
    if st:
        for k in ("G_mu", "G_craw", "G_dense"):
            out[k] = st[k].clone()
        if st.get("cv") is not None:
            out["cv.a"], out["cv.A"] = st["cv"]["a"].clone(), st["cv"]["A"].clone()
    out["objective"] = torch.tensor(m.history_.objective, dtype=torch.float64)
    if hasattr(m, "skipped_updates_"):
        out["counts"] = torch.tensor([m.site_updates_, m.skipped_updates_], dtype=torch.float64)
    return out


def _assert_same(a, b, tol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol, msg=k)


# ----------------------------------------------------------------- checkpoint/resume --
CASES = {
    "sep-batch": (_sep, cls_data, dict(max_steps=12, seed=0), 5),
    "sep-stochastic": (
        lambda: _sep("stochastic"),
        cls_data,
        dict(batch_size=10, epochs=3, seed=0),
        8,  # mid-epoch: the permutation cursor must be restored
    ),
    "qsgp": (_qsgp, reg_data, dict(batch_size=10, max_steps=25, seed=0), 9),
}


@pytest.mark.parametrize("case", list(CASES))
def test_resume_matches_uninterrupted_run(case, tmp_path):
    make, data, kw, stop = CASES[case]
    X, y = data()
    ref = make().fit(X, y, **kw)
    ck = tmp_path / "run.ckpt"
    first = make().fit(X, y, **kw, checkpoint=ck, callbacks=[lambda i: i["step"] >= stop])
    assert first.history_.steps == stop and first.history_.stopped == "callback"
    second = make().fit(X, y, **kw, checkpoint=ck, resume=True)
    assert second.history_.steps == ref.history_.steps
    # the resume is recorded (a model's end-of-fit events, e.g. QSGP's final noise step,
    # may follow it)
    assert f"resumed from {ck} at step {stop}" in second.history_.events
    _assert_same(_state(second), _state(ref))  # bit for bit
    # resuming a finished run takes no step and changes nothing
    third = make().fit(X, y, **kw, checkpoint=ck, resume=True)
    _assert_same(_state(third), _state(ref))


def test_sep_ctrl_c_checkpoints_and_resumes(tmp_path):
    X, y = cls_data()
    kw = dict(batch_size=10, epochs=2, seed=0)
    ck = tmp_path / "run.ckpt"

    def interrupt(info):
        if info["step"] == 7:
            raise KeyboardInterrupt

    m = _sep("stochastic")
    with pytest.warns(lg.TrainingWarning, match="interrupted at step 7"):
        m.fit(X, y, **kw, checkpoint=ck, callbacks=[interrupt])
    assert m.history_.stopped == "interrupted at step 7"
    # the running sums still equal the sums over the stored sites
    U = m.site_upsilon
    torch.testing.assert_close(m.A, (U.mT * m.site_nu) @ U, rtol=0, atol=1e-10)
    resumed = _sep("stochastic").fit(X, y, **kw, checkpoint=ck, resume=True)
    _assert_same(_state(resumed), _state(_sep("stochastic").fit(X, y, **kw)))


def test_checkpoint_of_another_run_or_scheme_is_refused(tmp_path):
    X, y = cls_data()
    ck = tmp_path / "run.ckpt"
    _sep().fit(X, y, max_steps=2, seed=0, checkpoint=ck)
    with pytest.raises(ValueError, match="different run"):
        _sep("stochastic").fit(X, y, batch_size=61, max_steps=2, seed=0, checkpoint=ck, resume=True)
    with pytest.raises(ValueError, match="different run"):
        _qsgp().fit(*reg_data(), max_steps=2, seed=0, checkpoint=ck, resume=True)


def test_sep_process_group_refuses_checkpoints():
    X, y = cls_data()
    with pytest.raises(ValueError, match="cannot checkpoint with process_group"):
        _sep().fit(X, y, max_steps=2, process_group=object(), checkpoint="x.ckpt")


# ------------------------------------------------------------------- optimizer_kwargs --
def test_optimizer_kwargs_reach_the_optimizer():
    X, y = reg_data()
    kw = dict(batch_size=20, max_steps=6, lr=0.5, optimizer="adadelta", seed=2)
    default = lg.SVGP(num_inducing=5).fit(X, y, **kw)
    ours = lg.SVGP(num_inducing=5).fit(X, y, **kw, optimizer_kwargs={"rho": 0.95, "eps": 1e-6})
    a, c = ours.state_dict(), default.state_dict()
    assert any(not torch.equal(a[k], c[k]) for k in a)  # the settings changed the run
    opt = lg.training.make_optimizer(
        "adadelta", [torch.nn.Parameter(torch.zeros(1))], 1.0, {"eps": 1e-3}
    )
    assert opt.defaults["rho"] == 0.9 and opt.defaults["eps"] == 1e-3  # default kept
    with pytest.raises(ValueError, match="do not suit the adam optimizer"):
        lg.SVGP(num_inducing=5).fit(X, y, max_steps=1, optimizer_kwargs={"rho": 0.9})
    with pytest.raises(ValueError, match="must not hold 'lr'"):
        lg.SVGP(num_inducing=5).fit(X, y, max_steps=1, optimizer_kwargs={"lr": 0.1})
    with pytest.raises(ValueError, match="must be a dict"):
        lg.SVGP(num_inducing=5).fit(X, y, max_steps=1, optimizer_kwargs=[("rho", 0.9)])


def test_optimizer_kwargs_in_sep_and_qsgp(monkeypatch):
    import latentgp.training.optim as optim_mod
    import latentgp.training.tasks as tasks_mod

    X, y = cls_data()
    seen = []
    real = tasks_mod.make_optimizer

    def spy(name, params, lr, kwargs=None):
        opt = real(name, params, lr, kwargs)
        seen.append(dict(opt.defaults))
        return opt

    monkeypatch.setattr(tasks_mod, "make_optimizer", spy)
    _sep("stochastic").fit(
        X, y, batch_size=10, max_steps=2, optimizer_kwargs={"rho": 0.5, "eps": 1e-3}
    )
    assert seen[-1]["rho"] == 0.5 and seen[-1]["eps"] == 1e-3
    # sign rule with up = down = 1: every entry keeps the rate lr (plain gradient descent)
    opt_state = []
    orig_step = optim_mod.SignAdaptive.step

    def record(self, closure=None):
        orig_step(self, closure)
        opt_state.append(self.state[self.param_groups[0]["params"][0]]["rate"].clone())

    monkeypatch.setattr(optim_mod.SignAdaptive, "step", record)
    _sep().fit(X, y, max_steps=3, lr=0.01, optimizer_kwargs={"up": 1.0, "down": 1.0})
    assert all(torch.all(r == 0.01) for r in opt_state)
    with pytest.raises(ValueError, match="sign optimizer"):
        _sep().fit(X, y, max_steps=1, optimizer_kwargs={"rho": 0.9})
    # QSGP: AdaGrad's eps; a huge eps shrinks the first step to lr * g / eps
    Xr, yr = reg_data()
    kw = dict(batch_size=10, max_steps=1, seed=0, lr=0.1)
    no_cfd = lg.QSGP.Covariance(closed_form_diagonal=False)
    grad = dict(learn_hyperparameters=False, covariance=no_cfd, mean_step="gradient")
    q0 = lg.QSGP(num_basis=30, **grad)  # AdaGrad on the mean too (the Newton step's isn't)
    q0.fit(Xr, yr, **kw, optimizer_kwargs={"eps": 1e6})
    q1 = lg.QSGP(num_basis=30, **grad)
    q1.fit(Xr, yr, **kw)
    # default eps: the first AdaGrad step moves every touched mu by lr * g / |g| = lr
    step1 = q1.mu.detach().abs()
    assert torch.allclose(step1[step1 > 0], torch.full_like(step1[step1 > 0], 0.1), rtol=1e-6)
    assert float(q0.mu.detach().abs().max()) < 1e-4
    with pytest.raises(ValueError, match="not settings of QSGP's sparse sgd"):
        lg.QSGP().fit(Xr, yr, max_steps=1, optimizer="sgd", optimizer_kwargs={"eps": 1.0})


# --------------------------------------------------------------------- data-parallel --
def _dist_worker(X, y, Xr, yr, out, ck):
    res = {
        "sep-batch": _state(_sep().fit(X, y, max_steps=6, seed=0)),
        "sep-stochastic": _state(_sep("stochastic").fit(X, y, batch_size=15, epochs=2, seed=0)),
        "qsgp": _state(_qsgp().fit(Xr, yr, batch_size=15, max_steps=12, seed=0)),
        "svgp": _state(lg.SVGP(num_inducing=5).fit(Xr, yr, batch_size=15, max_steps=6, seed=0)),
    }
    # a 2-process run stopped at step 3; the test resumes it in ONE process
    _sep("stochastic").fit(
        X, y, batch_size=15, epochs=2, seed=0, checkpoint=ck, callbacks=[lambda i: i["step"] >= 3]
    )
    if D.is_main():
        torch.save(res, out)


def test_two_processes_equal_one_process(tmp_path):
    """Data-parallel SEP (site updates of each process's part combined through the summed
    natural parameters) and QSGP (averaged gradients) follow the one-process trajectory up
    to round-off; a checkpoint of a 2-process run resumes in one process."""
    X, y = cls_data()  # 61 rows, batch 15: unequal parts
    Xr, yr = reg_data()
    out, ck = tmp_path / "two.pt", tmp_path / "run.ckpt"
    D.spawn(_dist_worker, 2, X, y, Xr, yr, str(out), str(ck))
    two = torch.load(out, weights_only=True)
    one = {
        "sep-batch": _state(_sep().fit(X, y, max_steps=6, seed=0)),
        "sep-stochastic": _state(_sep("stochastic").fit(X, y, batch_size=15, epochs=2, seed=0)),
        "qsgp": _state(_qsgp().fit(Xr, yr, batch_size=15, max_steps=12, seed=0)),
        # the last batch of an epoch (1 row) leaves one process without data
        "svgp": _state(lg.SVGP(num_inducing=5).fit(Xr, yr, batch_size=15, max_steps=6, seed=0)),
    }
    for k in one:
        _assert_same(two[k], one[k], tol=1e-9)
    resumed = _sep("stochastic").fit(
        X, y, batch_size=15, epochs=2, seed=0, checkpoint=ck, resume=True
    )
    _assert_same(_state(resumed), one["sep-stochastic"], tol=1e-9)


# ------------------------------------------------------------------------------ CLI --
def _cli(tmp_path, model, *extra):
    from latentgp.cli import main

    args = ["fit", "--data", "synth", "--model", model, "--seed", "1", "--json", *extra]
    if model == "qsgp":
        args += ["--inducing", "40", "--batch-size", "50"]
    else:
        args += ["--inducing", "6"]
    return main(args)


@pytest.mark.parametrize("model", ["sep", "qsgp"])
def test_cli_checkpoint_resume_round_trip(model, tmp_path, capsys):
    ck = str(tmp_path / "run.ckpt")
    a, b, c = (str(tmp_path / f"{k}.pt") for k in "abc")
    assert _cli(tmp_path, model, "--max-steps", "4", "--checkpoint", ck, "--out", a) == 0
    capsys.readouterr()
    assert (
        _cli(tmp_path, model, "--max-steps", "8", "--checkpoint", ck, "--resume", "--out", b) == 0
    )
    resumed = json.loads(capsys.readouterr().out)
    assert _cli(tmp_path, model, "--max-steps", "8", "--out", c) == 0
    plain = json.loads(capsys.readouterr().out)
    assert resumed["steps"] == plain["steps"] == 8
    assert resumed["error_rate"] == plain["error_rate"]
    sb = torch.load(b, weights_only=True)["state"]
    sc = torch.load(c, weights_only=True)["state"]
    for k in sc:
        torch.testing.assert_close(sb[k], sc[k], rtol=0, atol=0, msg=k)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["sep", "qsgp"])
def test_cli_nproc_2_matches_single_process(model, tmp_path, capsys):
    one, two = str(tmp_path / "one.pt"), str(tmp_path / "two.pt")
    assert _cli(tmp_path, model, "--max-steps", "5", "--out", one) == 0
    assert _cli(tmp_path, model, "--max-steps", "5", "--nproc", "2", "--out", two) == 0
    a = torch.load(one, weights_only=True)["state"]
    b = torch.load(two, weights_only=True)["state"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-9, atol=1e-9, msg=k)


class _FlakySEP(lg.SEP):
    """SEP whose batch steps raise ``FloatingPointError`` at the given calls (1-based)."""

    def __init__(self, fail_calls, **kw):
        super().__init__(**kw)
        self.fail_calls, self.calls = set(fail_calls), 0

    def batch_step(self, *args, **kwargs):
        self.calls += 1
        if self.calls in self.fail_calls:
            raise FloatingPointError("injected")
        return super().batch_step(*args, **kwargs)


def test_sep_step_repair_restores_and_halves_the_rate():
    """A failed SEP step restores the sites and parameters from before it (the shared
    step repair of training.loop.RestoringTask) and halves the learning rate; giving up
    names what failed and what was restored."""
    X, y = cls_data()
    Z = _sep().fit(X, y, max_steps=1).Z.detach().numpy()  # any fixed inducing inputs
    kw = dict(Z=Z, kernel=lg.kernels.RBF(lengthscale=1.0, variance=1.5))
    with pytest.warns(lg.TrainingWarning, match="restored the last good sites and parameters"):
        m = _FlakySEP({3}, **kw).fit(X, y, max_steps=4, lr=0.2)
    assert m.history_.events == [
        "step 2: injected",  # steps count from 0: the third call
        "step 2: non-finite EP evidence or gradient; restored the last good sites and "
        "parameters and lowered the learning rate to 0.1",
    ]
    assert len(m.history_.objective) == 3  # the failed step records nothing
    # the repaired run is the run of the same steps with the rate halved at step 3
    ref = lg.SEP(**kw).fit(X, y, max_steps=2, lr=0.2)
    assert m.history_.objective[:2] == ref.history_.objective
    with pytest.raises(FloatingPointError, match=(
        "training failed 8 times in a row with a non-finite EP evidence or gradient even "
        "after lowering the learning rate; the last good sites and parameters were restored"
    )), pytest.warns(lg.TrainingWarning):
        _FlakySEP(range(2, 100), **kw).fit(X, y, max_steps=10)
