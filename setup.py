"""Package discovery: every package under mirror/ and migrations/ goes into the wheel.

pyproject.toml's `packages.find` names packages after their directory, and cannot install
migrations/ as `mirror.migrations` (the name the alembic runner loads, pyproject's
package-dir). So both trees are found here, with setuptools' own `find_packages`, and
nothing is listed by hand: a new subpackage is shipped without anyone remembering it.
Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["mirror", "mirror.*"]),
        *(f"mirror.{name}" for name in find_packages(include=["migrations", "migrations.*"])),
    ]
)
