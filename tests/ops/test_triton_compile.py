"""Compiles every Triton kernel for NVIDIA GPUs (to a cubin, with Triton's own
ptxas), without a GPU. Triton's interpreter runs the kernels as NumPy code and
accepts things the compiler rejects (loop-carried type changes, scalar masks,
...); this catches them on a CPU-only machine. Runs in a child process, since
kernels defined under TRITON_INTERPRET=1 cannot be compiled."""
import os
import subprocess
import sys

from pyg_dist.testing import withTriton, withTritonCompiler

pytestmark = withTriton.mark

# Compute capabilities: Hopper is the target, Ampere the oldest
# GPU the kernels are meant for.
TARGETS = (90, 80)


@withTritonCompiler
def test_kernels_compile_for_nvidia_gpus():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("compiled") == len(TARGETS) * len(_variants())


def _variants():
    """(kernel name, index type, float type, constexprs) covering each kernel,
    each reduce, both index widths, fp32/fp16/bf16, with and without value/halo,
    and sizes of 1."""
    meta = {"BLOCK_E": 32, "BLOCK_F": 64}
    ones = {"num_feats": 1, "nnz": 1, "split_degree": 1, "stride_x": 1, "stride_out": 1}
    gat_all = {"HAS_HALO": True, "HAS_EDGE": True, "HAS_SCALE": True}
    gat_none = {"HAS_HALO": False, "HAS_EDGE": False, "HAS_SCALE": False}
    need_both = {"NEED_SRC": True, "NEED_ALPHA": True}
    return [
        ("_spmm_rows_kernel", "i32", "fp32", {"REDUCE": "sum", "HAS_VALUE": True,
                                              "HAS_HALO": True, **meta}),
        ("_spmm_rows_kernel", "i64", "bf16", {"REDUCE": "max", "HAS_VALUE": False,
                                              "HAS_HALO": True, **meta}),
        ("_spmm_rows_kernel", "i64", "fp16", {"REDUCE": "mean", "HAS_VALUE": True,
                                              "HAS_HALO": False, **meta}),
        ("_spmm_chunks_kernel", "i32", "bf16", {"REDUCE": "max", "HAS_VALUE": True,
                                                "HAS_HALO": True, **meta}),
        ("_spmm_chunks_kernel", "i64", "fp32", {"REDUCE": "sum", "HAS_VALUE": False,
                                                "HAS_HALO": False, **meta}),
        ("_spmm_combine_kernel", "i64", "fp16", {"REDUCE": "max", **meta}),
        ("_spmm_combine_kernel", "i32", "fp32", {"REDUCE": "mean", **meta}),
        ("_sddmm_kernel", "i32", "bf16", {"HAS_HALO": True, **meta}),
        ("_sddmm_kernel", "i64", "fp32", {"HAS_HALO": False, **meta}),
        # Integer arguments equal to 1 reach the compiler as constants.
        ("_spmm_rows_kernel", "i32", "fp32", {"REDUCE": "max", "HAS_VALUE": True,
                                              "HAS_HALO": True, **meta, **ones}),
        ("_spmm_combine_kernel", "i64", "bf16", {"REDUCE": "max", **meta, "num_feats": 1,
                                                 "nnz": 1, "stride_out": 1}),
        ("_gat_rows_kernel", "i32", "bf16", {**gat_all, **meta}),
        ("_gat_rows_kernel", "i64", "fp32", {**gat_none, **meta, "heads": 1}),
        ("_gat_chunks_kernel", "i64", "fp16", {**gat_all, **meta}),
        ("_gat_combine_kernel", "i32", "fp32", meta),
        ("_grad_rows_kernel", "i64", "fp16", {**gat_all, **meta}),
        ("_grad_rows_kernel", "i32", "fp32", {**gat_none, **meta, "num_feats": 1}),
        ("_grad_chunks_kernel", "i32", "bf16", {**gat_all, **meta}),
        ("_grad_combine_kernel", "i64", "fp32", {"HAS_HALO": True, "HAS_EDGE": True, **meta}),
        ("_source_rows_kernel", "i32", "bf16", {**gat_all, **need_both, **meta}),
        ("_source_rows_kernel", "i64", "fp32", {**gat_none, "NEED_SRC": False,
                                                "NEED_ALPHA": True, **meta}),
        ("_source_chunks_kernel", "i64", "fp16", {**gat_all, **need_both, **meta}),
    ]


def _signature(fn, index, floating, constexprs):
    """Triton types of the kernel arguments, from their names."""
    int64_ptrs = {"arg_ptr", "part_arg_ptr", "chunk_start_ptr", "chunk_end_ptr",
                  "hub_rows_ptr", "chunk_ptr_ptr", "chunk_row_ptr", "perm_ptr"}
    index_ptrs = {"rowptr_ptr", "col_ptr", "row_ptr", "colptr_ptr"}
    float32_ptrs = {"part_ptr", "part_max_ptr", "part_sum_ptr", "part_alpha_ptr", "lse_ptr",
                    "dz_ptr", "grad_dst_ptr", "grad_alpha_ptr"}
    float32_ptrs |= {"out_ptr"} if fn.__name__ == "_sddmm_kernel" else set()
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in int64_ptrs:
            signature[name] = "*i64"
        elif name in index_ptrs:
            signature[name] = "*" + index
        elif name in float32_ptrs:
            signature[name] = "*fp32"
        elif name.endswith("_ptr"):
            signature[name] = "*" + floating
        elif name == "negative_slope":
            signature[name] = "fp32"
        else:
            signature[name] = "i64" if name == "nnz" and index == "i64" else "i32"
    return signature


def _compile_all():
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from pyg_dist.ops.triton import (
        gat_grad_rows_kernel,
        gat_grad_sources_kernel,
        gat_kernel,
        sddmm_kernel,
        spmm_kernel,
    )

    modules = (gat_kernel, gat_grad_rows_kernel, gat_grad_sources_kernel, sddmm_kernel,
               spmm_kernel)
    for capability in TARGETS:
        for name, index, floating, constexprs in _variants():
            module = next(m for m in modules if hasattr(m, name))
            fn = getattr(module, name).fn  # the JITFunction under the autotuner
            source = ASTSource(fn, _signature(fn, index, floating, constexprs), constexprs)
            kernel = triton.compile(
                source, target=GPUTarget("cuda", capability, 32), options={"num_warps": 4}
            )
            assert kernel.asm.get("cubin"), f"{name}: no cubin for sm_{capability}"
            print(f"compiled {name} sm_{capability} {index} {floating} {constexprs}")


if __name__ == "__main__":
    _compile_all()
