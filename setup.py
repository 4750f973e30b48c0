"""Only the optional C helper lives here; everything else is in pyproject.toml.

``store._native`` computes a batch's body CRCs and gathers record slices without the GIL
(see store/_native.c). It is optional: where it cannot be compiled, the store uses one
ISA-L/zlib call per body and Arrow's ``take`` instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("store._native", sources=["store/_native.c"], optional=True, extra_compile_args=["-O3", "-pthread"], extra_link_args=["-pthread"])],
)
