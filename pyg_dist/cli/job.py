"""A training job of ``pyg-dist train`` as one typed, resolved configuration:
the graph, the model, and :func:`pyg_dist.train.train`'s option objects.

:meth:`Job.to_dict` is what the final JSON line carries as ``config`` and what
``--config FILE`` reads back, so feeding a run's line back reruns the job."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from pyg_dist.config import (
    STRATEGIES,
    Adam,
    Checkpoint,
    Evaluation,
    GradSync,
    Options,
    option,
    strategy_from_dict,
)
from pyg_dist.datasets.load import (
    DATASETS,
    HETERO_DATASETS,
    LINK_DATASETS,
    RECOMMEND_DATASETS,
    dataset_name,
)
from pyg_dist.datasets.ogbl import OGBL
from pyg_dist.models.gnn import DEEP_MODELS, JK_MODES, NORMS
from pyg_dist.models.hetero import HETERO_MODELS
from pyg_dist.partitioning.cut import METHODS
from pyg_dist.strategies import Settings, Strategy
from pyg_dist.train.post import POSTS, CorrectSmooth

__all__ = ["Graph", "Model", "Run", "Job", "RECIPES", "NAMED_RECIPES", "recipe_of",
           "HOMOGENEOUS_MODELS", "EMBEDDING_MODELS", "TASK_MODELS", "DECODERS", "TASKS", "RECALL_K",
           "DEFAULT_PARTS", "DEFAULT_EPOCHS", "KEYS", "check_shape", "resolve"]

#: Ranks (= parts) when neither the command line nor torchrun says.
DEFAULT_PARTS = 4
#: What a job trains: node labels, the edges of a link split (a seeded
#: RandomLinkSplit, or OGB's official split), or a user-item graph's
#: interactions (LightGCN with BPR).
TASKS = ("node", "link", "recommend")
#: The decoders of ``--task link``: the dot product, or OGB's ``LinkPredictor``.
DECODERS = ("dot", "mlp")
#: K of the recall@K and NDCG@K a recommendation reports (the LightGCN
#: paper's and PyG's ``examples/lightgcn.py``'s).
RECALL_K = 20
#: Every dataset a job names.
JOB_DATASETS = (*DATASETS, *LINK_DATASETS, *RECOMMEND_DATASETS)

#: Defaults per model: the published recipes (GCN: Kipf & Welling; GAT:
#: Velickovic et al.; GCNII: Chen et al., Cora; LightGCN: He et al., 64-wide
#: embeddings, 3 layers, lr 0.001, BPR's own L2 term instead of weight decay),
#: which SAGE and GIN share with GCN and the residual GCN / SAGE with GCNII
#: here; the heterogeneous models train as ``benchmarks/hetero.py`` measured
#: them. ``lr`` and ``weight_decay`` are :class:`~pyg_dist.config.Adam`'s.
_GCN_RECIPE = {"hidden": 16, "heads": 1, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4,
               "layers": 2}
_DEEP_RECIPE = {"hidden": 64, "heads": 1, "dropout": 0.6, "lr": 0.01, "weight_decay": 5e-4,
                "layers": 16}
_HETERO_RECIPE = {"hidden": 64, "heads": 2, "dropout": 0.0, "lr": 0.01, "weight_decay": 0.0,
                  "layers": 2}
RECIPES: dict[str, dict[str, Any]] = {
    "gcn": _GCN_RECIPE,
    "sage": _GCN_RECIPE,
    "gat": {**_GCN_RECIPE, "hidden": 8, "heads": 8, "dropout": 0.6, "lr": 0.005},
    "gin": _GCN_RECIPE,
    "gcn2": _DEEP_RECIPE,
    "resgcn": _DEEP_RECIPE,
    "ressage": _DEEP_RECIPE,
    **{name: _HETERO_RECIPE for name in HETERO_MODELS},
    "lightgcn": {"hidden": 64, "heads": 1, "dropout": 0.0, "lr": 0.001, "weight_decay": 0.0,
                 "layers": 3},
}
MODELS = tuple(RECIPES)
#: The models that learn an embedding per node and read no features
#: (PyG's ``LightGCN``, trained as :class:`~pyg_dist.nn.DistLightGCN`).
EMBEDDING_MODELS = ("lightgcn",)
#: The models of homogeneous graphs.
HOMOGENEOUS_MODELS = tuple(m for m in MODELS if m not in HETERO_MODELS)
#: The models of each task on a homogeneous graph: node classification's,
#: the encoders of link prediction, recommendation's.
TASK_MODELS = {"node": tuple(m for m in HOMOGENEOUS_MODELS if m not in EMBEDDING_MODELS),
               "link": tuple(m for m in HOMOGENEOUS_MODELS if m not in DEEP_MODELS),
               "recommend": EMBEDDING_MODELS}
#: The models that take the recipe options of :class:`~pyg_dist.models.GNN`
#: (norms, residual connections, a jumping-knowledge head, a linear skip,
#: labels as input).
SHALLOW_MODELS = tuple(m for m in HOMOGENEOUS_MODELS
                       if m not in DEEP_MODELS and m not in EMBEDDING_MODELS)
#: Named recipes (``--recipe``): settings over the model's published ones
#: (``RECIPES``), the models and the tasks each applies to. ``planetoid``:
#: the published recipes as they are (the GNNs' made on Cora, CiteSeer and
#: PubMed). ``ogb``: GraphSAGE (and GCN) as full-graph training on an
#: ogbn-arxiv-shaped graph measured best (``benchmarks/time_to_accuracy.py``):
#: 256 hidden features, dropout between the layers but not on the input, no
#: weight decay. ``ogbl``: OGB's link-prediction examples (ogbl-collab's GCN
#: and GraphSAGE): 3 layers of 256, no dropout, lr 0.001, no weight decay,
#: scored by OGB's ``LinkPredictor`` (as deep and wide as the encoder).
#: ``recsys``: LightGCN as full-graph training (one step an epoch) measured
#: best on the synthetic recommendation graph (``benchmarks/peer_link.py``):
#: 2 layers, lr 0.01 (the paper's 0.001 is for mini-batches of 2,048).
NAMED_RECIPES: dict[str, tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]] = {
    "planetoid": ({}, MODELS, TASKS),
    "ogb": ({"hidden": 256, "input_dropout": 0.0, "weight_decay": 0.0}, ("gcn", "sage"),
            ("node",)),
    "ogbl": ({"hidden": 256, "layers": 3, "dropout": 0.0, "lr": 0.001, "weight_decay": 0.0,
              "decoder": "mlp"}, ("gcn", "sage"), ("link",)),
    "recsys": ({"layers": 2, "lr": 0.01}, ("lightgcn",), ("recommend",)),
}


def recipe_of(model: str, recipe: str = "planetoid") -> dict[str, Any]:
    """The settings of ``model`` under the named ``recipe``: its published
    recipe with the named one's settings on top."""
    return {**RECIPES[model], **NAMED_RECIPES[recipe][0]}


def dataset_task(dataset: str) -> str:
    """The task a dataset trains unless the job says: ``"link"`` for OGB's
    link datasets, ``"recommend"`` for a user-item graph, else ``"node"``."""
    return ("link" if dataset in LINK_DATASETS
            else "recommend" if dataset in RECOMMEND_DATASETS else "node")


def _spelled(names: tuple[str, ...]) -> str:
    """``names`` in few characters, those that share a stem before the first
    ``-`` together: ``synthetic[-arxiv|-mag], cora|pubmed, ogbn-arxiv|mag``."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.split("-")[0], []).append(name)
    spelled: list[str] = []
    singles: list[str] = []
    for stem, members in groups.items():
        if members == [stem]:
            singles.append(stem)
            continue
        if singles:
            spelled.append("|".join(singles))
            singles = []
        rest = [m[len(stem) + 1:] for m in members if m != stem]
        spelled.append(f"{stem}[-{'|-'.join(rest)}]" if stem in members
                       else f"{stem}-{'|'.join(rest)}")
    if singles:
        spelled.append("|".join(singles))
    return ", ".join(spelled)


@dataclass(frozen=True)
class Graph(Options):
    """The graph: a dataset cut into parts, or a partition folder."""

    dataset: str = option("synthetic", _spelled(JOB_DATASETS),
                          type=dataset_name, choices=JOB_DATASETS, metavar="NAME")
    root: str | None = option(None, "folder of <root>/Cora/raw or <root>/ogbn_arxiv/raw",
                                   type=str, metavar="DIR")
    parts: int | None = option(None, "parts = ranks (default: 4 or torchrun's)", type=int,
                               metavar="P")
    method: str = option("metis", "|".join(METHODS), choices=METHODS,
                         metavar="HOW")
    seed: int = option(0, "seed of the graph, cut, model and dropout", metavar="S")
    num_nodes: int | None = option(None, "nodes of a synthetic graph", type=int, metavar="N")
    avg_degree: float | None = option(None, "edges per node of a synthetic graph", type=float,
                                      metavar="D")
    parts_dir: str | None = option(None, "a partition folder (default: cut one)",
                                   type=str, metavar="DIR")
    # None (the default) is the dataset's own task, set when the graph is made
    task: str = option(None, "node|link|recommend (default: the dataset's)", type=str,
                       choices=TASKS, metavar="TASK")

    def __post_init__(self) -> None:
        object.__setattr__(self, "dataset", dataset_name(self.dataset))  # "Cora" is "cora"
        if self.task is None:  # the dataset's own: ogbl-* link, synthetic-rec recommend
            object.__setattr__(self, "task", dataset_task(self.dataset))
        super().__post_init__()

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Graph:
        """The graph :meth:`to_dict` wrote; a recommendation that names no
        dataset trains the synthetic user-item graph."""
        if isinstance(values, dict) and values.get("task") == "recommend" \
                and values.get("dataset") is None:
            values = {**values, "dataset": RECOMMEND_DATASETS[0]}
        graph: Graph = super().from_dict(values)
        return graph

    def check(self) -> None:
        if self.dataset not in JOB_DATASETS:
            raise ValueError(f"Graph(dataset={self.dataset!r}): use one of "
                             f"{', '.join(JOB_DATASETS)}")
        if self.method not in METHODS:
            raise ValueError(f"Graph(method={self.method!r}): use one of {', '.join(METHODS)}")
        if self.task not in TASKS:
            raise ValueError(f"Graph(task={self.task!r}): use one of {', '.join(TASKS)}")
        if self.parts is not None and (not isinstance(self.parts, int) or self.parts < 1):
            raise ValueError(f"Graph(parts={self.parts!r}): use a number of ranks >= 1")
        _at_least(self, "seed", 0, "it seeds the graph, the cut, the model and dropout")
        _at_least(self, "num_nodes", 1, "or None for the dataset's own")
        if self.avg_degree is not None and not self.avg_degree > 0:
            raise ValueError(f"Graph(avg_degree={self.avg_degree!r}): give edges per node > 0, "
                             f"or None for the dataset's own")
        for name in ("root", "parts_dir"):
            if getattr(self, name) == "":
                raise ValueError(f"Graph({name}=''): name a folder, or leave {name} None")
        if self.dataset in HETERO_DATASETS and self.avg_degree is not None:
            raise ValueError(f"--avg-degree does not apply to {self.dataset} (its relations "
                             f"keep ogbn-mag's edges per node); leave it out")
        self._check_task()

    def _check_task(self) -> None:
        """The task fits the dataset: OGB's link datasets train links on
        their split, a user-item graph trains recommendation, and only it."""
        name, task = self.dataset, self.task
        if name in LINK_DATASETS and task != "link":
            raise ValueError(f"--dataset {name} is OGB's link prediction on its official "
                             f"split, which trains --task link (its default), not --task "
                             f"{task}; leave --task out")
        if name in RECOMMEND_DATASETS and task != "recommend":
            raise ValueError(f"--dataset {name} is a user-item graph without features, which "
                             f"trains --task recommend (its default), not --task {task}; leave "
                             f"--task out")
        if task == "recommend" and name not in RECOMMEND_DATASETS and self.parts_dir is None:
            raise ValueError(f"--task recommend trains a bipartite user-item graph, which "
                             f"--dataset {name} is not; use --dataset "
                             f"{'|'.join(RECOMMEND_DATASETS)} (its default) or --parts-dir of a "
                             f"user-item split, or --task link to predict {name}'s edges")

    @property
    def hetero(self) -> bool:
        """Whether the dataset is heterogeneous."""
        return self.dataset in HETERO_DATASETS

    @property
    def metric(self) -> str:
        """What a link task's evaluation reports
        (:class:`~pyg_dist.strategies.link_task.LinkTask`'s ``metric``):
        recall@20 for a recommendation, OGB's metric for its link datasets
        (Hits@50 ogbl-collab, MRR ogbl-citation2, Hits@20 ogbl-ddi), else
        ROC-AUC; ``"accuracy"`` for node classification."""
        if self.task == "recommend":
            return f"recall@{RECALL_K}"
        if self.task == "link":
            return OGBL[self.dataset].metric if self.dataset in OGBL else "auc"
        return "accuracy"

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values; the task only where it is not node
        classification (a node job writes what it wrote before tasks)."""
        out = super().to_dict()
        if out["task"] == "node":
            del out["task"]
        return out


@dataclass(frozen=True)
class Model(Options):
    """The model and its sizes; unset sizes are the model's published recipe."""

    name: str = option("gcn", "|".join(MODELS), choices=MODELS, metavar="NAME")
    recipe: str = option("planetoid", "|".join(NAMED_RECIPES), choices=tuple(NAMED_RECIPES),
                         metavar="NAME")
    layers: int | None = option(None, "layers (default: the model's recipe)", type=int,
                                metavar="L")
    hidden: int | None = option(None, "hidden width", type=int,
                                metavar="H")
    heads: int | None = option(None, "heads", type=int, metavar="N")
    dropout: float | None = option(None, "dropout (default: the model's recipe)", type=float,
                                   metavar="P")
    edge_dropout: float = option(0.0, "DropEdge rate, shared hash", metavar="P")
    input_dropout: float | None = option(None, "dropout of the input (default: --dropout; ogb 0)",
                                         type=float, metavar="P")
    norm: str | None = option(None, "|".join(NORMS) + " norm after hidden layers", type=str,
                              choices=NORMS, metavar="KIND")
    residual: bool = option(False, "residual connections (layers of equal width)")
    jk: str | None = option(None, "|".join(JK_MODES) + ": a jumping-knowledge head", type=str,
                            choices=JK_MODES, metavar="MODE")
    skip: bool = option(False, "a linear skip around every layer")
    labels_as_input: bool = option(False, "half the training labels as input each epoch")
    decoder: str | None = option(None, "dot|mlp (OGB's LinkPredictor) of --task link",
                                 type=str, choices=DECODERS, metavar="HOW")

    def check(self) -> None:
        if self.name not in RECIPES:
            raise ValueError(f"Model(name={self.name!r}): use one of {', '.join(MODELS)}")
        if self.recipe not in NAMED_RECIPES:
            raise ValueError(f"Model(recipe={self.recipe!r}): use one of "
                             f"{', '.join(NAMED_RECIPES)}")
        if self.name not in NAMED_RECIPES[self.recipe][1]:
            raise ValueError(f"--recipe {self.recipe} is made for --model "
                             f"{'|'.join(NAMED_RECIPES[self.recipe][1])}, not {self.name}; "
                             f"leave --recipe out for {self.name}'s published recipe")
        for name in ("layers", "hidden", "heads"):
            _at_least(self, name, 1, "or None for the model's recipe")
        for name in ("dropout", "edge_dropout", "input_dropout"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ValueError(f"Model({name}={value!r}): {name} is the fraction dropped, in "
                                 f"[0, 1), e.g. 0.5")
        for name, choices in (("norm", NORMS), ("jk", JK_MODES)):
            value = getattr(self, name)
            if value not in (None, *choices):
                raise ValueError(f"Model({name}={value!r}): use one of {', '.join(choices)}, "
                                 f"or None for none")
        extras = [flag for flag, given in (
            ("--edge-dropout", self.edge_dropout), ("--input-dropout", self.input_dropout),
            ("--norm", self.norm), ("--residual", self.residual), ("--jk", self.jk),
            ("--skip", self.skip), ("--labels-as-input", self.labels_as_input))
            if given not in (None, False, 0.0)]
        if extras and self.name not in SHALLOW_MODELS:
            verb, them = ("apply", "them") if len(extras) > 1 else ("applies", "it")
            raise ValueError(f"{', '.join(extras)} {verb} to the models of pyg_dist.models.GNN, "
                             f"not to {self.name}; leave {them} out or use --model "
                             f"{'|'.join(SHALLOW_MODELS)}")
        if self.dropout and (self.name in HETERO_MODELS or self.name in EMBEDDING_MODELS):
            raise ValueError(f"--model {self.name} has no dropout (got --dropout "
                             f"{self.dropout}); leave it out")
        if self.decoder not in (None, *DECODERS):
            raise ValueError(f"Model(decoder={self.decoder!r}): use one of "
                             f"{', '.join(DECODERS)}, or None for the dot product")
        if self.decoder == "mlp" and self.name not in SHALLOW_MODELS:
            raise ValueError(f"--decoder mlp scores the embeddings of a GNN encoder, --model "
                             f"{'|'.join(SHALLOW_MODELS)}; --model {self.name} is scored by the "
                             f"dot product (leave --decoder out)")

    def sizes(self) -> tuple[int, int, int, float]:
        """``layers``, ``hidden``, ``heads`` and ``dropout`` of a resolved model."""
        sizes = self.resolved()
        assert sizes.layers is not None and sizes.hidden is not None, "recipes set every size"
        assert sizes.heads is not None and sizes.dropout is not None, "recipes set every size"
        return sizes.layers, sizes.hidden, sizes.heads, sizes.dropout

    def resolved(self) -> Model:
        """This model with its recipe's sizes (and input dropout and the
        decoder, where the recipe sets them) where none are set."""
        recipe = recipe_of(self.name, self.recipe)
        return dataclasses.replace(self, **{k: recipe[k] for k in ("layers", "hidden", "heads",
                                                                   "dropout", "input_dropout",
                                                                   "decoder")
                                            if k in recipe and getattr(self, k) is None})

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values; the recipe options only where set (a
        job without them writes what earlier releases wrote)."""
        out = super().to_dict()
        for f in dataclasses.fields(self):
            if f.name in _RECIPE_OPTIONS and out[f.name] == f.default:
                del out[f.name]
        return out

    def options(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~pyg_dist.models.GNN` beyond its sizes."""
        return {"edge_dropout": self.edge_dropout, "input_dropout": self.input_dropout,
                "norm": self.norm, "residual": self.residual, "jk": self.jk,
                "skip": self.skip, "label_input": self.labels_as_input}


#: The fields of :class:`Model` written only where set.
_RECIPE_OPTIONS = ("recipe", "input_dropout", "norm", "residual", "jk", "skip",
                   "labels_as_input", "decoder")


@dataclass(frozen=True)
class Run(Options):
    """How the job runs: logging, progress, a time limit, where the model is saved."""

    log_every: int = option(0, "print the ledger's totals every N epochs", metavar="N")
    progress: bool = option(True, "a progress bar on rank 0")
    timeout: float | None = option(None, "stop spawned ranks after S seconds", type=float,
                                   metavar="S")
    save: str | None = option(None, "write the trained state_dict (PyG's keys) to FILE",
                              type=str, metavar="FILE")

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values; ``save`` only where set (a job that
        saves nothing writes what earlier releases wrote)."""
        out = super().to_dict()
        if out["save"] is None:
            del out["save"]
        return out

    def check(self) -> None:
        _at_least(self, "log_every", 0, "0 prints nothing")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"Run(timeout={self.timeout!r}): give seconds > 0, or None to let "
                             f"the ranks run as long as they need")


def _at_least(options: Options, name: str, low: int, fix: str) -> None:
    """Raises naming the fix unless integer field ``name`` is :obj:`None` or >= ``low``
    (its type is checked already)."""
    value = getattr(options, name)
    if value is not None and value < low:
        raise ValueError(f"{type(options).__name__}({name}={value!r}): {name} must be an "
                         f"integer >= {low}; {fix}")


@dataclass(frozen=True)
class Job:
    """One resolved ``pyg-dist train`` job."""

    graph: Graph
    model: Model
    epochs: int
    strategy: Strategy
    grad_sync: GradSync
    optimizer: Adam
    evaluation: Evaluation
    checkpoint: Checkpoint | None
    run: Run
    post: CorrectSmooth | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"graph": self.graph.to_dict(), "model": self.model.to_dict(),
                "epochs": self.epochs,
                "strategy": {"name": self.strategy.name, **self.strategy.to_dict()},
                "grad_sync": self.grad_sync.to_dict(), "optimizer": self.optimizer.to_dict(),
                "evaluation": self.evaluation.to_dict(),
                "checkpoint": None if self.checkpoint is None else self.checkpoint.to_dict(),
                "run": self.run.to_dict(),
                **({} if self.post is None else {"post": self.post.describe()})}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Job:
        """The job :meth:`to_dict` wrote (missing keys and fields take their
        defaults); raises :class:`ValueError` naming the key or field, the bad
        value and the fix."""
        check_shape(values)
        epochs = values.get("epochs", DEFAULT_EPOCHS)
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"Job(epochs={epochs!r}): epochs must be an integer >= 1, the "
                             f"optimisation steps (--epochs N)")
        ckpt = values.get("checkpoint")
        return cls(Graph.from_dict(values.get("graph", {})),
                   Model.from_dict(values.get("model", {})), epochs,
                   strategy_from_dict(values.get("strategy", {})),
                   GradSync.from_dict(values.get("grad_sync", {})),
                   Adam.from_dict(values.get("optimizer", {})),
                   Evaluation.from_dict(values.get("evaluation", {})),
                   None if ckpt is None else Checkpoint.from_dict(ckpt),
                   Run.from_dict(values.get("run", {})), _post(values.get("post")))


#: The keys of a job's dictionary (:meth:`Job.to_dict`), and an example of each section.
KEYS = {"graph": {"dataset": "cora", "root": "data"}, "model": {"name": "gcn"},
            "epochs": 200, "strategy": {"name": "graph-parallel", "halo": "exact"},
            "grad_sync": {"compress": "fp16"}, "optimizer": {"lr": 0.01},
            "evaluation": {"every": 1}, "checkpoint": {"dir": "ckpt"},
            "run": {"progress": False}, "post": {"name": "cs"}}
#: Optimisation steps of a job that does not say.
DEFAULT_EPOCHS = 200


def check_shape(values: Any) -> None:
    """Raises naming the fix unless ``values`` has a job's shape: a JSON
    object of :data:`KEYS`' keys, each section an object (``checkpoint``
    and ``post`` may be null), a strategy named, if at all, by one of
    :data:`~pyg_dist.config.STRATEGIES`. The fields are checked when read."""
    if not isinstance(values, dict):
        raise ValueError(f"a job is a JSON object with keys {', '.join(KEYS)} (what "
                         f"Job.to_dict() writes), not {values!r}")
    unknown = sorted(set(values) - set(KEYS), key=str)
    if unknown:
        raise ValueError(f"Job has no key {', '.join(map(repr, unknown))}; its keys are "
                         f"{', '.join(KEYS)}")
    for key, value in values.items():
        if key == "epochs" or (key in ("checkpoint", "post") and value is None):
            continue
        if not isinstance(value, dict):
            null = " or null" if key in ("checkpoint", "post") else ""
            raise ValueError(f"Job({key}={value!r}): {key} must be a JSON object of its "
                             f"fields{null}, e.g. \"{key}\": {json.dumps(KEYS[key])}")
    name = values.get("strategy", {}).get("name", "graph-parallel")
    if not isinstance(name, str) or name not in STRATEGIES:
        raise ValueError(f"Job(strategy={values['strategy']!r}): unknown strategy {name!r}; "
                         f"use one of {', '.join(STRATEGIES)}")


def resolve(base: dict[str, Any], given: dict[str, dict[str, Any]]) -> Job:
    """The job of a config dictionary ``base`` (a job's :meth:`Job.to_dict`,
    possibly partial) with the command line's ``given`` options on top
    (``{"graph": {...}, "strategy": {...}, "top": {"epochs": ...}}``) and the
    model's recipe under whatever neither sets."""
    check_shape(base)
    values = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, fields in given.items():
        if section == "top":
            values.update(fields)
        elif section == "post":
            values["post"] = _post_spec(fields["spec"])
        elif section == "strategy":
            values["strategy"] = _strategy(values.get("strategy") or {}, fields)
        else:
            values[section] = {**(values.get(section) or {}), **fields}
    graph = Graph.from_dict(values.get("graph", {}))
    if graph.hetero and graph.parts_dir is None:
        values["model"] = {"name": HETERO_MODELS[0], **(values.get("model") or {})}
    spec = OGBL.get(graph.dataset)
    if graph.task == "recommend" or (spec is not None and not spec.features
                                     and graph.parts_dir is None):
        # LightGCN learns what a graph without features lacks: an embedding per node
        values["model"] = {"name": EMBEDDING_MODELS[0], **(values.get("model") or {})}
    model = Model.from_dict(values.get("model", {})).resolved()
    _check_fits(graph, model.name)
    _check_task(graph, model, values)
    recipe = recipe_of(model.name, model.recipe)
    values["model"] = model.to_dict()
    values["optimizer"] = {"lr": recipe["lr"], "weight_decay": recipe["weight_decay"],
                           **(values.get("optimizer") or {})}
    if values.get("checkpoint") is not None and values["checkpoint"].get("dir") is None:
        raise ValueError("--resume and --checkpoint-every need --checkpoint DIR")
    job = Job.from_dict(values)
    _check_strategy(job, hetero=graph.hetero or model.name in HETERO_MODELS)
    return job


def _post_spec(spec: str) -> dict[str, Any] | None:
    """The ``post`` section of ``--post SPEC`` (``none`` or a step's spelling)."""
    if spec.strip() == "none":
        return None
    name = spec.split(",")[0].strip()
    if name not in POSTS:
        raise ValueError(f"--post {spec}: use none or one of {', '.join(POSTS)}, e.g. "
                         f"--post cs,correction_layers=20")
    try:
        return POSTS[name].parse(spec).describe()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--post {spec}: {exc}") from None


def _post(values: dict[str, Any] | None) -> CorrectSmooth | None:
    """The post-processing step a job's ``post`` section names (``{"name":
    ..., **fields}``), or :obj:`None`."""
    if values is None:
        return None
    name = values.get("name")
    if name not in POSTS:
        raise ValueError(f"Job(post={values!r}): name the step, {{\"name\": "
                         f"{' | '.join(map(repr, POSTS))}, ...fields}}, or write null")
    return POSTS[name].from_dict(values)


def _check_strategy(job: Job, hetero: bool) -> None:
    """What the job's strategy says of its model, ranks and settings, before
    any rank starts."""
    strategy = job.strategy
    if job.graph.task != "node" and strategy.links_refusal:
        able = " or ".join(f"--strategy {n}" for n, c in STRATEGIES.items()
                           if not c.links_refusal)
        raise ValueError(f"--strategy {strategy.name} cannot train --task {job.graph.task}: "
                         f"{strategy.links_refusal}; use {able}")
    strategy.check_settings(Settings(job.epochs, job.grad_sync, job.evaluation,
                                     job.checkpoint, hetero, job.model.labels_as_input,
                                     links=job.graph.task != "node"))
    strategy.check_model(job.model.name, job.model.layers, job.model.options())
    if job.post is not None and (hetero or strategy.ranks_per_part() != 1):
        raise ValueError(f"--post {job.post.name} propagates over a homogeneous graph with a "
                         f"part per rank; leave it out for "
                         f"{'a heterogeneous graph' if hetero else f'--strategy {strategy.name}'}")
    if job.graph.parts is not None:
        strategy.graph_parts(job.graph.parts)


def _check_task(graph: Graph, model: Model, values: dict[str, Any]) -> None:
    """The model, its recipe and the options given fit the task: LightGCN
    for recommendation (and for links, its embeddings standing in for
    features), a GNN encoder for links on a graph with features, a decoder
    for links alone, node classification's options for it alone."""
    task, name = graph.task, model.name
    if task == "recommend" and name not in EMBEDDING_MODELS:
        raise ValueError(f"--task recommend trains --model {'|'.join(EMBEDDING_MODELS)} "
                         f"(LightGCN with BPR, PyG's examples/lightgcn.py), not --model {name}; "
                         f"leave --model out")
    if task == "node" and name in EMBEDDING_MODELS:
        raise ValueError(f"--model {name} learns node embeddings for --task recommend|link, "
                         f"not --task node; add --task recommend (a user-item graph) or "
                         f"--task link, or use --model {'|'.join(SHALLOW_MODELS)}")
    if task == "link" and name in DEEP_MODELS:
        raise ValueError(f"--task link trains --model {'|'.join(TASK_MODELS['link'])} (the "
                         f"encoder), not --model {name}")
    spec = OGBL.get(graph.dataset)
    if (task == "link" and spec is not None and not spec.features and graph.parts_dir is None
            and name not in EMBEDDING_MODELS):
        raise ValueError(f"--dataset {graph.dataset} has no node features for --model {name} to "
                         f"read; train an embedding per node with --model "
                         f"{'|'.join(EMBEDDING_MODELS)}")
    recipe_tasks = NAMED_RECIPES[model.recipe][2]
    if task not in recipe_tasks:
        raise ValueError(f"--recipe {model.recipe} is made for --task {'|'.join(recipe_tasks)}, "
                         f"not --task {task}; add --task {recipe_tasks[0]}, or leave --recipe "
                         f"out for {name}'s published recipe")
    if model.decoder is not None and task != "link":
        raise ValueError(f"--decoder scores the pairs of --task link, not --task {task}; add "
                         f"--task link, or leave --decoder out")
    post = values.get("post")
    if task != "node" and (post is not None or model.labels_as_input):
        flag = f"--post {post['name']}" if post is not None else "--labels-as-input"
        raise ValueError(f"{flag} reads node labels, which --task {task} has none of; leave it "
                         f"out")
    run = values.get("run") or {}
    if name in EMBEDDING_MODELS and run.get("save") is not None:
        raise ValueError(f"--save writes rank 0's weights, but each rank of --model {name} "
                         f"holds its own rows of the embedding table; write every node's "
                         f"embedding with 'pyg-dist embed' from the run's --checkpoint DIR")


def _check_fits(graph: Graph, model: str) -> None:
    """A heterogeneous model for a heterogeneous dataset and a homogeneous
    one otherwise (a partition folder is checked when loaded)."""
    if graph.parts_dir is not None:
        return
    if graph.hetero and model not in HETERO_MODELS:
        raise ValueError(f"--dataset {graph.dataset} is a heterogeneous graph; use --model "
                         f"{'|'.join(HETERO_MODELS)} (got --model {model})")
    if not graph.hetero and model in HETERO_MODELS:
        raise ValueError(f"--model {model} trains a heterogeneous graph; use --dataset "
                         f"{'|'.join(HETERO_DATASETS)}, or --model "
                         f"{'|'.join(TASK_MODELS[graph.task])} for --dataset {graph.dataset}")


def _strategy(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The strategy the command line names (``name``), or that its options
    belong to, with the base's fields when the base is the same strategy."""
    given = dict(given)
    name = given.pop("name", None)
    owners = {n for n, cls in STRATEGIES.items() for key in given
              if key in _fields(cls) and not _shared(key)}
    if name is None:
        if len(owners) > 1:
            raise ValueError(f"options of several strategies were given "
                             f"({', '.join(sorted(owners))}); pick one with --strategy")
        name = owners.pop() if owners else base.get("name", "graph-parallel")
    cls = STRATEGIES[name]
    stray = sorted(key for key in given if key not in _fields(cls))
    if stray:
        flags = ", ".join("--" + key.replace("_", "-") for key in stray)
        raise ValueError(f"{flags} do(es) not apply to --strategy {name}; leave them out or "
                         f"choose the strategy they belong to")
    fields = {k: v for k, v in base.items() if k in _fields(cls)} \
        if base.get("name", "graph-parallel") == name else {}
    return {"name": name, **fields, **given}


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


def _shared(key: str) -> bool:
    """Whether several strategies have field ``key`` (it names none of them)."""
    return sum(key in _fields(cls) for cls in STRATEGIES.values()) > 1

