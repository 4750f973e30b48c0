"""What pyproject.toml cannot say: the import name of ``store/`` and the optional C helper.

The store's folder is ``store/`` (the project's layout) but its import name is ``rmqlog``: a
folder named ``store`` in a user's working directory (a store root, say) must never shadow
the library, and ``store`` is an unrelated package on the public index. ``spark_rmq`` keeps
its folder's name.

``rmqlog._native`` computes a batch's body CRCs and gathers record slices without the GIL
(see store/_native.c). It is optional: where it cannot be compiled, the store uses one
ISA-L/zlib call per body and Arrow's ``take`` instead.
"""

from setuptools import Extension, find_packages, setup

setup(
    packages=[
        "rmqlog",
        *("rmqlog." + p for p in find_packages("store")),
        *find_packages(include=["spark_rmq*", "rmqnet*"]),
    ],
    package_dir={"rmqlog": "store"},
    package_data={
        "rmqlog": ["py.typed"],
        "spark_rmq": ["py.typed"],
        "rmqnet": ["py.typed"],
        "rmqnet.console": ["templates/*.html", "static/*.js", "static/*.css"],
    },
    ext_modules=[
        Extension(
            "rmqlog._native",
            sources=["store/_native.c"],
            optional=True,
            extra_compile_args=["-O3", "-pthread"],
            extra_link_args=["-pthread"],
        )
    ],
)
