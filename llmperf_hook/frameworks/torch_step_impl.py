"""Which torch.optim step a script's optimizer call runs (OptimizerConfig.torch_optimizer_impl), read from the call's
literal arguments (never run), priced by graph/step_ops.torch_step_bytes_per_param.

torch 2.x (torch/optim/adam.py, adamw.py, sgd.py):
- Adam / AdamW(params, lr, betas, eps, weight_decay, amsgrad, *, foreach, maximize, capturable, differentiable,
  fused): fused=True runs one kernel per tensor list (_fused_adam_ / _fused_adamw_), else the multi-tensor foreach
  step on CUDA (foreach=False: the single-tensor loop, the same element passes a tensor at a time: priced as
  foreach). amsgrad=True (6th positional or keyword) keeps max_exp_avg_sq and takes
  torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs) before the square root (foreach) or reads and writes it in
  the fused kernel.
- SGD(params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize, foreach, differentiable,
  fused): _multi_tensor_sgd runs _foreach_mul_(bufs, momentum) and _foreach_add_(bufs, grads) when momentum != 0,
  _foreach_add_(grads, bufs, alpha=momentum) under nesterov, then _foreach_add_(params, grads, alpha=-lr); fused=True
  (_fused_sgd_) does it in one kernel per tensor list. A momentum given as a computed value (args.momentum) is taken
  as on, as a computed weight decay is (frameworks/torch_weight_decay.py).
"""

from __future__ import annotations

import ast

ADAM_AMSGRAD_POSITION = 5
"""amsgrad's position in Adam / AdamW(params, lr, betas, eps, weight_decay, amsgrad)."""
SGD_POSITIONS = {"momentum": 2, "nesterov": 5}
"""Positions in SGD(params, lr, momentum, dampening, weight_decay, nesterov)."""


def _argument(call: ast.Call, name: str, position: int) -> ast.AST | None:
    given = next((k.value for k in call.keywords if k.arg == name), None)
    return given if given is not None else call.args[position] if len(call.args) > position else None


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _on(node: ast.AST | None) -> bool:
    """A numeric argument that is not a literal 0 / 0.0 / None / False (absent: off)."""
    if node is None:
        return False
    return not (isinstance(node, ast.Constant) and not node.value)


def torch_step_impl(call: ast.Call, class_name: str) -> str:
    """OptimizerConfig.torch_optimizer_impl of `class_name(...)` (torch.optim's Adam, AdamW or SGD) as called:
    "foreach" / "fused" (+ "_amsgrad"), "sgd" / "sgd_momentum" / "sgd_nesterov", "sgd_fused" / "sgd_momentum_fused"."""
    fused = _is_true(_argument(call, "fused", len(call.args) + 1))
    if class_name == "SGD":
        momentum = _on(_argument(call, "momentum", SGD_POSITIONS["momentum"]))
        if fused:
            return "sgd_momentum_fused" if momentum else "sgd_fused"
        if not momentum:
            return "sgd"
        return "sgd_nesterov" if _is_true(_argument(call, "nesterov", SGD_POSITIONS["nesterov"])) else "sgd_momentum"
    impl = "fused" if fused else "foreach"
    return f"{impl}_amsgrad" if _is_true(_argument(call, "amsgrad", ADAM_AMSGRAD_POSITION)) else impl
