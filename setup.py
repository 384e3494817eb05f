from setuptools import find_namespace_packages, setup

version: dict = {}
with open("dbt/adapters/fenced_spark/__version__.py") as f:
    exec(f.read(), version)

with open("README.md") as f:
    long_description = f.read()

setup(
    name="dbt-fenced-spark",
    version=version["version"],
    description="dbt on Spark + Delta whose incremental writes fail loudly instead of "
    "silently overwriting a concurrent writer",
    long_description=long_description,
    long_description_content_type="text/markdown",
    packages=find_namespace_packages(include=["dbt", "dbt.*"]),
    # The packages sit at the root: an editable install (`make setup`) is then a plain .pth of
    # the clone, without the import-hook finder whose warning pip prints on every install.
    package_dir={"": "."},
    include_package_data=True,
    package_data={
        "dbt.include.fenced_spark": [
            "dbt_project.yml",
            "profile_template.yml",
            "macros/*.sql",
            "macros/**/*.sql",
        ]
    },
    python_requires=">=3.10",
    install_requires=[
        # 1.12 installs with dbt-1.12-overrides.txt (README, "Install").
        "dbt-core>=1.11,<1.13",
        "dbt-spark[session]~=1.11.0",
        "pyspark~=4.1.0",
        "delta-spark==4.4.1",
        "sqlglot>=30,<31",
    ],
    extras_require={
        "thrift": ["dbt-spark[PyHive]~=1.11.0"],
        # pyspark's Spark Connect client: gRPC, Arrow and pandas.
        "connect": ["pyspark[connect]~=4.1.0"],
    },
)
