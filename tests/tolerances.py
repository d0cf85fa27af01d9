"""Tolerances per dtype, in one table. Error is measured as
max|ours - ref| / max(max|ref|, 1); never loosen an entry to make a test pass."""
import torch

TOL = {
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}
#: float32 results of two runs that do the same arithmetic through different
#: code paths (a policy that reduces to the exact one, a resumed run against
#: the uninterrupted one): no sum is reordered, so tighter than TOL.
SAME = 1e-6


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    ours, ref = ours.detach(), ref.detach()
    if ref.numel() == 0:
        return 0.0
    if not ref.is_floating_point():
        ref = ref.double()
    # max|x| as max(-min x, max x), NaN propagating, without the copies that
    # abs() makes: half the time on Cora-sized gradients (2708 x 1433)
    low, high = torch.aminmax(torch.sub(ours.double(), ref))
    err = torch.maximum(-low, high)
    low, high = torch.aminmax(ref)
    scale = torch.maximum(-low, high).double()  # exact: max|ref| is one of ref's values
    return (err / scale.clamp(min=1)).item()


def assert_close(ours: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype = torch.float32,
                 what: str = "", tol: float | None = None) -> None:
    """``rel_err(ours, ref) <= TOL[dtype]`` (or ``tol``, an entry of this module)."""
    tol = TOL[dtype] if tol is None else tol
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(ref.shape)}"
    err = rel_err(ours, ref)
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:.1g} ({dtype})"
