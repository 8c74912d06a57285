"""How one changed flag reads in tune's 'changes vs your command' column (tune/render.Change)."""

from __future__ import annotations

from llmperf_hook.tune.render import Change


def test_value_changes_read_old_to_new() -> None:
    assert str(Change("argv", "--micro-batch-size", "1", "2")) == "--micro-batch-size 1->2"
    assert str(Change("argv", "--sequence-parallel", None, "")) == "add --sequence-parallel"
    assert str(Change("argv", "--recompute-activations", "", None)) == "drop --recompute-activations"
    assert str(Change("ds.json", "zero_optimization.stage", "3", "1")) == "ds_config zero_optimization.stage 3->1"


def test_a_bare_switch_given_a_value_shows_both_forms() -> None:
    """Hugging Face's `--gradient_checkpointing` (a bare switch, nargs='?') rewritten to `--gradient_checkpointing
    False` read '--gradient_checkpointing ->False': the old side was an empty string. Both sides are now what the
    user types."""
    assert str(Change("argv", "--gradient_checkpointing", "", "False")) == \
        "--gradient_checkpointing -> --gradient_checkpointing False"
    assert str(Change("argv", "--gradient_checkpointing", "False", "")) == \
        "--gradient_checkpointing False -> --gradient_checkpointing"
