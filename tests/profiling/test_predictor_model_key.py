"""FittedProfile answers which model prices an op once per (class, phase, dtype) (H143): predict asks it for every
op (supports, predict_s, extrapolation_warnings) and tune for every candidate; the answer comes from the profile's
metadata, fixed when it is read, so the memo gives what the lookup gives."""

from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.resources import configs_dir


def test_each_question_is_resolved_once(monkeypatch) -> None:
    asked, lookup = [], FittedProfile._model_key
    monkeypatch.setattr(FittedProfile, "_model_key", lambda self, *q: asked.append(q) or lookup(self, *q))
    profile = FittedProfile(configs_dir() / "profiles" / "a100-sxm4-80gb")
    questions = [(c, phase, dtype) for c in (*profile.op_classes, "optimizer", "no_such_class")
                 for phase in ("fwd", "bwd", "recompute") for dtype in ("bf16", "fp16", "fp32")]
    answers = [[profile.supports(*q) for q in questions] for _ in range(3)]
    assert len(asked) == len(questions)
    assert answers[0] == answers[2] == [lookup(profile, *q) in profile._entries for q in questions]
    assert any(answers[0]) and not all(answers[0])
