"""Training a deep model as a layer pipeline on a grid of graph parts × stages."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pyg_dist.data.dist_data import DistData, DistEdgeIndex
from pyg_dist.halo.exchange import exchange_route
from pyg_dist.halo.ledger import GRADIENTS, STAGE
from pyg_dist.metrics import accuracies
from pyg_dist.models.gnn import DeepGNN
from pyg_dist.ops import spmm
from pyg_dist.partitioning.io import read_meta
from pyg_dist.runtime import distributed
from pyg_dist.strategies.layer_pipeline.chunks import Chunk, Chunking, chunk_labels
from pyg_dist.strategies.layer_pipeline.grid import Grid, grid
from pyg_dist.strategies.layer_pipeline.layers import adjacency, check_splittable, update
from pyg_dist.strategies.layer_pipeline.masks import StepMasks, step_masks
from pyg_dist.strategies.layer_pipeline.split import balance, check_stages, measure_costs

__all__ = ["Pipeline", "load"]

#: How later stages get GCNII's initial rows.
INITIAL_ROWS = ("send", "recompute")


def load(folder: Any, stages: int = 1, halo: Any = None) -> DistData:
    """This rank's part of a partition folder cut into ``world size / stages``
    parts, loaded in its stage's process group (collective), with ``halo`` as
    its default policy (see :class:`~pyg_dist.DistData`).

    Args:
        folder (str or os.PathLike): The partition folder.
        stages (int, optional): Number of stages. (default: :obj:`1`)
        halo (HaloPolicy, optional): The graph's default halo policy,
            as :meth:`~pyg_dist.DistData.load` takes it. (default: :obj:`None`)

    Raises:
        ValueError: If the folder's part count is not world size / stages.
    """
    layout = grid(stages)
    meta = read_meta(folder)
    if meta.num_parts != layout.parts:
        raise ValueError(
            f"'{folder}' holds {meta.num_parts} parts, but {distributed.world_size()} ranks in "
            f"{stages} stages need {layout.parts} (world size / stages); re-partition with "
            f"num_parts={layout.parts} or run {meta.num_parts * stages} ranks")
    return DistData.load(folder, group=layout.group, halo=halo)


@dataclass
class HistoryTable:
    """A layer's input as last computed, for every owned and halo row, with the
    epoch each row was computed in (-1: the fill before the first epoch)."""

    own: Tensor
    halo: Tensor
    stamp: Tensor  # [owned ; halo]

    @classmethod
    def empty(cls, num_owned: int, num_halo: int, like: Tensor) -> HistoryTable:
        """Tables of rows as wide as ``like``'s, of its dtype and device."""
        never = torch.iinfo(torch.int64).min
        return cls(like.new_zeros(num_owned, like.size(1)), like.new_zeros(num_halo, like.size(1)),
                   torch.full((num_owned + num_halo,), never, device=like.device))

    def write(self, chunk: Chunk, rows: Tensor, halo: Tensor | None, epoch: int) -> None:
        self.own[chunk.rows] = rows.detach()
        self.stamp[chunk.rows] = epoch
        if halo is not None:
            self.halo[chunk.halo_rows] = halo.detach()
            self.stamp[self.own.size(0) + chunk.halo_rows] = epoch

    def age(self, col: Tensor, epoch: int) -> int:
        """Largest age (epochs) of the rows at ``col`` (over ``[owned ; halo]``)."""
        return 0 if col.numel() == 0 else epoch - int(self.stamp[col].min())


class Pipeline:
    r"""A :class:`~pyg_dist.models.DeepGNN` trained on a grid of ``parts`` graph
    parts × ``stages`` layer stages (GNNPipe's layer pipeline with graph
    parallelism inside each stage).

    Stage :math:`s` owns a run of consecutive layers (the input projection
    goes with the first, the output projection with the last), balanced by
    their measured cost unless ``balance`` gives the layers per stage. Each
    rank's rows are cut into ``chunks`` (METIS on its graph); forward streams
    the chunks through the stages (rows, and GCNII's initial rows unless
    ``initial_rows="recompute"``, sent to the same part's next stage), backward
    returns their gradients the same way,
    GPipe's schedule: fill, steady state, drain; one optimiser step per epoch.

    With one chunk, each stage runs the model's own layers on its part, so
    the graph's halo policies (:func:`load`'s ``halo``) apply within a stage.
    With more, a layer aggregating chunk :math:`k` reads its current rows (the
    chunk's own and its halo rows, exchanged within the stage at every chunk,
    compressed as the layer's policy says) and, for the
    other chunks, its history table: this epoch's rows for chunks already
    done, last epoch's for the rest (at most one epoch old; the ledger books
    the largest age per layer). Gradients flow through the current rows only:
    those into other chunks' rows, historical or this epoch's, are dropped.
    With one chunk nothing is historical and the pipeline computes exactly
    what the model computes on the whole graph. The tables are filled by one
    forward pass before the first epoch. Dropout masks are graph-parallel
    training's (``pyg_dist.strategies.layer_pipeline.masks``): the same for every node,
    layer and step whatever the parts, stages and chunks, so one chunk trains
    exactly as graph-parallel training, dropout included.

    Args:
        model (DeepGNN): The model (every rank holds all of it; each trains
            its stage's parameters, see :meth:`gather_parameters`).
        data (DistData): This rank's part, loaded in its stage's group
            (:func:`load`).
        stages (int, optional): Layer stages. (default: :obj:`1`)
        chunks (int, optional): Chunks per part. (default: :obj:`1`)
        balance (list[int], optional): Layers per stage; measured if
            :obj:`None`. (default: :obj:`None`)
        seed (int, optional): METIS seed of the chunks. (default: :obj:`0`)
        initial_rows (str, optional): How later stages of GCNII get the initial
            rows :math:`\mathbf{H}^{(0)}`: ``"send"`` them along with the rows
            (stage boundaries carry twice the width, their gradients come back)
            or ``"recompute"`` them from the input features with a replica of
            the input projection on every stage (its gradients summed over all
            ranks; every stage draws the same input dropout masks): half
            the boundary bytes for the projection's compute on every stage.
            (default: :obj:`"send"`)
    """

    def __init__(self, model: nn.Module, data: Any, stages: int = 1, chunks: int = 1,
                 balance: list[int] | None = None, seed: int = 0,
                 initial_rows: str = "send") -> None:
        if not isinstance(model, DeepGNN):
            raise ValueError(
                f"the layer pipeline splits a pyg_dist.models.DeepGNN (gcn2, resgcn, ressage), "
                f"not {type(model).__name__}; train other models graph parallel (stages=1)")
        for k, conv in enumerate(model.convs):
            check_splittable(conv, f"convs.{k}")
        self.grid: Grid = grid(stages)
        graph = getattr(data, "edge_index", None)
        if not isinstance(graph, DistEdgeIndex) or graph.channel.group is not self.grid.group:
            raise ValueError(
                "the layer pipeline needs this rank's part loaded in its stage's process group: "
                "data = pyg_dist.strategies.layer_pipeline.load(folder, stages)")
        if initial_rows not in INITIAL_ROWS:
            raise ValueError(f"initial_rows='{initial_rows}': use one of "
                             f"{', '.join(INITIAL_ROWS)}")
        self.model, self.data, self.graph = model, data, graph
        self.chunks = chunks
        self.recompute = initial_rows == "recompute" and model.kind == "gcn2" and stages > 1
        layers = len(model.convs)
        if balance is None:
            counts = _split(model, data, self.grid.stages, layers)
        else:
            counts = list(balance)
            if len(counts) != stages or sum(counts) != layers or min(counts) < 1:
                raise ValueError(f"balance={counts} must give each of the {stages} stages at "
                                 f"least one of the {layers} layers")
        starts = [sum(counts[:s]) for s in range(stages + 1)]
        self.bounds = [(starts[s], starts[s + 1]) for s in range(stages)]
        self.span = range(*self.bounds[self.grid.stage])
        self.width: int = int(model.lins[0].out_features)  # type: ignore[arg-type]
        self.state_width = self.width * (2 if model.kind == "gcn2" and not self.recompute else 1)
        labels = self._shared_labels(chunk_labels(graph, chunks, seed) if self.grid.first
                                     else None)
        self.training_chunks = Chunking.build(graph, chunks, labels)
        self.whole = (self.training_chunks if chunks == 1
                      else Chunking.build(graph, 1, torch.zeros_like(labels)))
        like = data.x.new_empty(0, self.width)
        self.tables = {k: HistoryTable.empty(graph.num_owned, graph.num_halo, like)
                       for k in self.span} if chunks > 1 else {}
        self.epoch = 0
        self._sends: list[Any] = []
        self._adjacency: dict[int, tuple[Any, tuple[Tensor, ...]]] = {}
        self.train_count = max(distributed.all_reduce_values(
            [float(data.train_mask.sum())], group=self.grid.group)[0], 1.0)
        self.ledger.notes["pipeline"] = self.schedule()

    @property
    def ledger(self) -> Any:
        return self.graph.ledger

    def schedule(self) -> dict[str, Any]:
        """The layout and GPipe schedule: fill and drain take ``stages - 1``
        chunk steps each, the steady state ``chunks - stages + 1`` (when
        positive); the idle share of an ideal schedule is
        :math:`(S-1)/(K+S-1)`."""
        s, k = self.grid.stages, self.chunks
        return {"parts": self.grid.parts, "stages": s, "chunks": k,
                "layers": [list(range(*b)) for b in self.bounds],
                "initial_rows": "recompute" if self.recompute else "send",
                "fill_steps": s - 1, "steady_steps": max(k - s + 1, 0), "drain_steps": s - 1,
                "ideal_bubble": (s - 1) / (k + s - 1)}

    def modules(self, stage: int | None = None) -> list[nn.Module]:
        """The modules of ``stage`` (default: this rank's)."""
        stage = self.grid.stage if stage is None else stage
        start, stop = self.bounds[stage]
        out: list[nn.Module] = list(self.model.convs[start:stop])
        if stage == 0 or self.recompute:
            out.insert(0, self.model.lins[0])
        if stage == self.grid.stages - 1:
            out.append(self.model.lins[1])
        return out

    def parameters(self, stage: int | None = None) -> list[nn.Parameter]:
        """The parameters of ``stage`` (default: this rank's)."""
        return [p for m in self.modules(stage) for p in m.parameters()]

    def gather_parameters(self) -> None:
        """Copies every stage's parameters to every rank (collective), so that
        each rank's model is the trained one."""
        if not distributed.is_distributed() or self.grid.stages == 1:
            return
        for s in range(self.grid.stages):
            for p in self.parameters(s):
                p.data.copy_(distributed.broadcast(p.data, src=self.grid.stage_root(s)))

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs beyond the model, the optimizer and the graph's
        state: the epochs trained, the layers of each stage (measured, so
        another run may split them otherwise) and the history tables."""
        return {"epoch": self.epoch, "bounds": [list(b) for b in self.bounds],
                "tables": {k: (t.own, t.halo, t.stamp) for k, t in self.tables.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` (the layers per stage as saved).

        Args:
            state (dict): What :meth:`state_dict` returned.
        """
        bounds = [tuple(b) for b in state["bounds"]]
        if len(bounds) != self.grid.stages:
            raise ValueError(f"the checkpoint's layer pipeline has {len(bounds)} stages, this "
                             f"run {self.grid.stages}; resume with stages={len(bounds)}")
        self.epoch = int(state["epoch"])
        self.bounds = bounds
        self.span = range(*self.bounds[self.grid.stage])
        self.tables = {int(k): HistoryTable(own.clone(), halo.clone(), stamp.clone())
                       for k, (own, halo, stamp) in state["tables"].items()}

    # -- one epoch -----------------------------------------------------------------

    def train_step(self, optimizer: torch.optim.Optimizer) -> float:
        """One epoch: every chunk forward and backward through the stages, the
        stage's gradients summed over its parts, one optimiser step. Returns
        the global training loss (mean over all training nodes)."""
        model, last = self.model, self.grid.last
        model.train()
        optimizer.zero_grad(set_to_none=True)
        masks = step_masks(model, self.graph)
        if self.tables and self.epoch == 0:
            with torch.no_grad():
                self._forward_only(self.whole, masks, record=True, epoch=-1, direction="fwd")
        ins: list[Tensor | None] = []
        outs: list[Tensor] = []
        loss = 0.0
        for chunk in self.training_chunks.chunks:
            h, x0, state = self._enter(chunk, masks, "fwd")
            h = self._layers(self.training_chunks, chunk, masks, h, x0, self.epoch, "fwd",
                             record=bool(self.tables))
            if last:
                h = self._drop(masks, h, chunk, self.output_call)
                out = self._loss(chunk, model.outputs(h))
                loss += float(out.detach())
            else:
                out = self._pack(h, x0)
                self._send(chunk, out.detach(), "fwd")
            ins.append(state)
            outs.append(out)
        for chunk in reversed(self.training_chunks.chunks):
            out, state = outs[chunk.index], ins[chunk.index]
            if last:
                out.backward()
            else:
                out.backward(self._receive(chunk, "bwd"))
            if state is not None:
                grad = state.grad if state.grad is not None else torch.zeros_like(state)
                self._send(chunk, grad, "bwd")
        self._finish_sends()
        self._sum_gradients()
        optimizer.step()
        self.epoch += 1
        return distributed.all_reduce_values([loss])[0]

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float, float]:
        """Global accuracy on the train, validation and test masks: the whole
        model, exactly (one chunk, no history)."""
        self.model.eval()
        logits = self._forward_only(self.whole, None, record=False, epoch=self.epoch,
                                    direction="eval")
        return accuracies(None if logits is None else logits.argmax(dim=-1), self.data)

    def _forward_only(self, chunking: Chunking, masks: StepMasks | None, record: bool,
                      epoch: int, direction: str) -> Tensor | None:
        """The whole graph forward in one chunk; the last stage's logits."""
        model, chunk = self.model, chunking.chunks[0]
        h, x0, _ = self._enter(chunk, masks, direction)
        h = self._layers(chunking, chunk, masks, h, x0, epoch, direction, record)
        if self.grid.last:
            return model.outputs(self._drop(masks, h, chunk, self.output_call))
        self._send(chunk, self._pack(h, x0), direction)
        self._finish_sends()
        return None

    def _layers(self, chunking: Chunking, chunk: Chunk, masks: StepMasks | None, h: Tensor,
                x0: Tensor, epoch: int, direction: str, record: bool) -> Tensor:
        """This stage's layers on one chunk's rows: with one chunk (and no
        table to fill), the model's own layers under the graph's halo policies."""
        model = self.model
        if chunking.count == 1 and not record:
            for index in self.span:
                conv = model.convs[index]
                h_in = self._drop(masks, h, chunk, 1 + index)
                h = model.combine(h, model.convolve(conv, h_in, x0, self.graph))
            return h
        for index in self.span:
            conv = model.convs[index]
            h_in = self._drop(masks, h, chunk, 1 + index)
            name = str(conv.halo_name or f"convs.{index}")
            halo = None
            if self.grid.parts > 1:
                halo = exchange_route(h_in, self.graph.channel, name, chunk.route,
                                      self._codec(conv), direction)
            adj = chunking.adjacency(*self._conv_adjacency(index))[chunk.index]
            rowptr, col, value = adj.current
            agg = spmm(rowptr, col, h_in, value, "sum", x_halo=halo)
            if adj.reads_history:
                table = self.tables[index]
                rowptr, col, value = adj.other
                agg = agg + spmm(rowptr, col, table.own, value, "sum", x_halo=table.halo)
                self.ledger.record(name, direction, staleness=table.age(col, epoch))
            if record:
                self.tables[index].write(chunk, h_in, halo, epoch)
            h = model.combine(h, update(conv, agg, h_in, x0))
        return h

    def _codec(self, conv: Any) -> Any:
        """The compression of ``conv``'s halo policy (or the graph's default)."""
        return self.graph.registry.policy(getattr(conv, "halo", None)).codec

    def _enter(self, chunk: Chunk, masks: StepMasks | None,
               direction: str) -> tuple[Tensor, Tensor, Tensor | None]:
        """A chunk's rows entering this stage: ``(h, x0, received)``, the
        received rows requiring grad in training (their gradient goes back)."""
        if self.grid.first:
            h = self._initial(chunk, masks)
            return h, h, None
        state = self._receive(chunk, direction)
        if torch.is_grad_enabled():
            state.requires_grad_()
        if self.recompute:
            return state, self._initial(chunk, masks), state
        h, x0 = self._unpack(state)
        return h, x0, state

    def _initial(self, chunk: Chunk, masks: StepMasks | None) -> Tensor:
        r""":math:`\mathbf{H}^{(0)}` of a chunk's rows (recomputed on a later
        stage, with the first stage's masks)."""
        return self.model.inputs(self._drop(masks, self.data.x[chunk.rows], chunk, 0))

    def _drop(self, masks: StepMasks | None, h: Tensor, chunk: Chunk, call: int) -> Tensor:
        """A chunk's rows ``h`` dropped as graph-parallel training drops them
        at the step's dropout ``call`` (see :meth:`StepMasks.drop`); unchanged
        without masks (evaluation, no dropout)."""
        if masks is None:
            return h
        return masks.drop(h, self.graph.global_id[chunk.rows], call)

    @property
    def output_call(self) -> int:
        """The step's dropout call of the output projection's input."""
        return len(self.model.convs) + 1

    def _sum_gradients(self) -> None:
        """Sums this stage's gradients over its parts (a recomputed input
        projection's over all ranks), booked as layer ``gradients``."""
        shared = set(self.model.lins[0].parameters()) if self.recompute else set()
        own = [p for p in self.parameters() if p not in shared]
        groups = [(own, self.grid.group), (list(shared), None)]
        for params, group in groups:
            if params and distributed.is_distributed(group):
                distributed.all_reduce_gradients(params, group)
                self.ledger.record("gradients", GRADIENTS,
                                   bytes_sent=sum(p.numel() * p.element_size() for p in params))

    def _conv_adjacency(self, index: int) -> tuple[Any, Tensor, Tensor, Tensor]:
        if index not in self._adjacency:
            self._adjacency[index] = adjacency(self.model.convs[index], self.graph,
                                               self.data.x.dtype)
        key, (rowptr, col, value) = self._adjacency[index]
        return key, rowptr, col, value

    def _loss(self, chunk: Chunk, logits: Tensor) -> Tensor:
        mask = self.data.train_mask[chunk.rows]
        y = self.data.y[chunk.rows]
        return F.cross_entropy(logits[mask], y[mask], reduction="sum") / self.train_count

    # -- between stages ---------------------------------------------------------------

    def _pack(self, h: Tensor, x0: Tensor) -> Tensor:
        return torch.cat([h, x0], dim=1) if self.state_width > self.width else h

    def _unpack(self, state: Tensor) -> tuple[Tensor, Tensor]:
        if self.state_width > self.width:
            h, x0 = state.split(self.width, dim=1)
            return h, x0
        return state, state

    def _tag(self, chunk: Chunk, direction: str) -> int:
        return 1 + 2 * chunk.index + (direction == "bwd")

    def _send(self, chunk: Chunk, rows: Tensor, direction: str) -> None:
        step = 1 if direction != "bwd" else -1
        peer = self.grid.rank_of(self.grid.stage + step)
        rows = rows.contiguous()
        work = distributed.isend(rows, peer, tag=self._tag(chunk, direction),
                                 what="stage transfer")
        self._sends.append((work, rows))
        self.ledger.record(*_stage_key(direction), bytes_sent=rows.numel() * rows.element_size(),
                           exchanges=1)

    def _receive(self, chunk: Chunk, direction: str) -> Tensor:
        step = -1 if direction != "bwd" else 1
        peer = self.grid.rank_of(self.grid.stage + step)
        rows = self.data.x.new_empty(chunk.rows.numel(), self.state_width)
        start = time.perf_counter()
        distributed.recv(rows, peer, tag=self._tag(chunk, direction), what="stage transfer")
        self.ledger.record(*_stage_key(direction), bytes_recv=rows.numel() * rows.element_size(),
                           seconds=time.perf_counter() - start)
        return rows

    def _finish_sends(self) -> None:
        distributed.wait_all((work for work, _ in self._sends), "stage transfer")
        self._sends = []

    def _shared_labels(self, labels: Tensor | None) -> Tensor:
        """The first stage's chunk labels, on every stage of the same part."""
        if self.grid.stages == 1:
            assert labels is not None
            return labels
        if labels is None:
            labels = torch.empty(self.graph.num_owned, dtype=torch.long,
                                 device=self.graph.col.device)
            distributed.recv(labels, self.grid.rank_of(0), what="stage transfer")
        else:
            for s in range(1, self.grid.stages):
                distributed.send(labels, self.grid.rank_of(s), what="stage transfer")
        return labels


def _stage_key(direction: str) -> tuple[str, str]:
    """Ledger layer and direction of stage traffic: training as ``stage``,
    evaluation with the evaluation traffic."""
    if direction == "eval":
        return "stages", "eval"
    return f"stages/{direction}", STAGE


def _split(model: Any, data: Any, stages: int, layers: int) -> list[int]:
    check_stages(layers, stages)  # before measuring
    if stages == 1:
        return [layers]
    return balance(measure_costs(model, data), stages)
