"""The numba preset of the engine's kernel modules (:mod:`.decoding_kernels`,
:mod:`.sampling.fused_kernels`, :mod:`.sampling.trapped_kernels`): compiled once and cached on
disk (``cache=True``, so every process finds them again), the GIL released, IEEE arithmetic
(no fastmath: the kernels must round as their torch twins do) and numpy's error model (a
division by zero gives inf or NaN, as in torch). Imported only by those modules: importing it
needs numba."""

from __future__ import annotations

from typing import Any

import numba

#: (typed Any: a kernel takes its arguments as numba reads them, which numba's stubs do not say)
jit: Any = numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")
