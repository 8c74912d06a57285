"""A stage's stored activations price each layer mix of its chunks once (H143): a chunk's bytes follow its layer
count and MoE layer count alone (activations.chunk_layer_bytes, memory.checkpoints_off_gpu_bytes), and an
interleaved stage has vpp chunks of one mix. Same result as pricing every chunk."""

from llmperf_hook.api import load_cluster
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import gpt3_175b
from llmperf_hook.schedule import activations as act
from llmperf_hook.schedule import memory


def test_each_layer_mix_is_priced_once_with_the_same_bytes(monkeypatch) -> None:
    cfg = gpt3_175b(tp=8, pp=8, vpp=4, dp=16, global_batch_size=1536, sequence_parallel=True, recompute="selective")
    graph = build_graph(cfg, load_cluster("dgx-a100"))
    stage = graph.stages[3]
    per_chunk = [act.chunk_layer_bytes(cfg, c.num_layers, memory.moe_layer_count(c))
                 - memory.checkpoints_off_gpu_bytes(cfg, c.num_layers) for c in stage.chunks]
    in_flight = act.microbatches_in_flight(cfg, stage.stage)
    expected = sum(per_chunk) / len(per_chunk) * cfg.parallel.vpp * in_flight - \
        act.cpu_offloaded_layers(cfg) * act.layer_activation_bytes(cfg)
    priced, own = [], act.chunk_layer_bytes
    monkeypatch.setattr(act, "chunk_layer_bytes", lambda *args: priced.append(args) or own(*args))
    assert memory.activation_bytes(cfg, stage)["activations"] == expected
    assert len(stage.chunks) == 4 and len(priced) == 1
