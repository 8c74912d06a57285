"""llmperf_hook: predict the step time, throughput and memory of a Megatron-LM or DeepSpeed training job
from its launch command, before it runs; then launch it, instrument it, and tune it.

Importing this package is light: no torch, deepspeed, lightgbm or scikit-learn (a test proves it).
"""

__version__ = "0.1.0"
