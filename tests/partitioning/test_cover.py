"""The vertex-cover plan against independent oracles: brute force on small
cuts, a plain augmenting-path matching (König) on larger ones."""
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyg_dist.partitioning.cover import vertex_cover_plan


def cut_pairs(edge_index, parts, num_parts):
    """Per ordered pair (p, q), p != q, the set of distinct cut edges, by plain Python."""
    pairs = {(p, q): set() for p in range(num_parts) for q in range(num_parts) if p != q}
    for s, d in edge_index.t().tolist():
        p, q = int(parts[s]), int(parts[d])
        if p != q:
            pairs[p, q].add((s, d))
    return pairs


def brute_force_cover_size(edges):
    """The size of a minimum vertex cover, by enumerating subsets."""
    nodes = sorted({("L", s) for s, _ in edges} | {("R", d) for _, d in edges})
    assert len(nodes) <= 12, "brute force is for small cuts only"
    for k in range(len(nodes) + 1):
        for chosen in itertools.combinations(nodes, k):
            cover = set(chosen)
            if all(("L", s) in cover or ("R", d) in cover for s, d in edges):
                return k
    raise AssertionError("the whole vertex set is a cover")


def matching_size(edges):
    """Maximum matching size by Kuhn's augmenting paths."""
    adjacency = {}
    for s, d in edges:
        adjacency.setdefault(s, []).append(d)
    match_of_right = {}

    def augment(u, seen):
        for v in adjacency[u]:
            if v not in seen:
                seen.add(v)
                if v not in match_of_right or augment(match_of_right[v], seen):
                    match_of_right[v] = u
                    return True
        return False

    return sum(augment(u, set()) for u in adjacency)


def check_is_cover(plan, pairs):
    for (p, q), edges in pairs.items():
        sources = set(plan.sources[p][q].tolist())
        targets = set(plan.targets[p][q].tolist())
        uncovered = [(s, d) for s, d in edges if s not in sources and d not in targets]
        assert not uncovered, f"pair {p}->{q}: edges {uncovered[:3]} not covered"
        assert sources <= {s for s, _ in edges}, "a covered source outside the cut"
        assert targets <= {d for _, d in edges}, "a covered target outside the cut"
        if not edges:
            assert not sources and not targets, f"pair {p}->{q} has no cut but a cover"
            assert int(plan.rows_today[p, q]) == 0


@st.composite
def random_graphs(draw, max_nodes):
    num_nodes = draw(st.integers(1, max_nodes))
    num_edges = draw(st.integers(0, 3 * max_nodes))
    num_parts = draw(st.integers(1, 4))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    if num_edges and draw(st.booleans()):  # duplicates and self-loops, for sure
        edge_index = torch.cat([edge_index, edge_index[:, : num_edges // 2],
                                torch.arange(num_nodes).repeat(2, 1)], dim=1)
    parts = torch.randint(0, num_parts, (num_nodes,), generator=g)
    return edge_index, parts, num_parts


@settings(max_examples=150, deadline=None)
@given(case=random_graphs(max_nodes=7))
def test_small_cuts_minimum_by_brute_force(case):
    edge_index, parts, num_parts = case
    plan = vertex_cover_plan(edge_index, parts, num_parts)
    pairs = cut_pairs(edge_index, parts, num_parts)
    check_is_cover(plan, pairs)
    for (p, q), edges in pairs.items():
        assert int(plan.rows_cover[p, q]) == brute_force_cover_size(edges), f"pair {p}->{q}"
        assert int(plan.rows_today[p, q]) == len({s for s, _ in edges})


@settings(max_examples=40, deadline=None)
@given(case=random_graphs(max_nodes=60))
def test_larger_cuts_minimum_by_koenig(case):
    edge_index, parts, num_parts = case
    plan = vertex_cover_plan(edge_index, parts, num_parts)
    pairs = cut_pairs(edge_index, parts, num_parts)
    check_is_cover(plan, pairs)
    for (p, q), edges in pairs.items():
        assert int(plan.rows_cover[p, q]) == matching_size(edges), f"pair {p}->{q}"
        assert int(plan.rows_today[p, q]) == len({s for s, _ in edges})
    assert (plan.rows_cover <= plan.rows_today).all()


@pytest.mark.parametrize("seed", range(20))
def test_bipartite_cuts_between_two_parts(seed):
    """Random bipartite graphs placed as the cut between two parts, both directions."""
    g = torch.Generator().manual_seed(seed)
    num_left, num_right = torch.randint(1, 7, (2,), generator=g).tolist()
    density = float(torch.rand(1, generator=g))
    mask = torch.rand(num_left, num_right, generator=g) < density
    s, d = mask.nonzero().t()
    edge_index = torch.stack([s, d + num_left])
    parts = torch.tensor([0] * num_left + [1] * num_right)
    if seed % 2:  # the same cut, read from part 1 into part 0
        parts = 1 - parts
    plan = vertex_cover_plan(edge_index, parts, 2)
    pairs = cut_pairs(edge_index, parts, 2)
    check_is_cover(plan, pairs)
    p, q = int(parts[0]), int(parts[-1])
    assert int(plan.rows_cover[p, q]) == brute_force_cover_size(pairs[p, q])
    assert int(plan.rows_cover[q, p]) == 0 and int(plan.rows_today[q, p]) == 0


def test_star_and_complete_bipartite():
    # one source read by five targets: one row either way
    star = torch.tensor([[0] * 5, [1, 2, 3, 4, 5]])
    plan = vertex_cover_plan(star, torch.tensor([0, 1, 1, 1, 1, 1]), 2)
    assert plan.sources[0][1].tolist() == [0] and plan.targets[0][1].numel() == 0
    # five sources into one target: one partial sum instead of five rows
    fan_in = star.flip(0)
    plan = vertex_cover_plan(fan_in, torch.tensor([0, 1, 1, 1, 1, 1]), 2)
    assert plan.rows_today[1, 0] == 5
    assert plan.targets[1][0].tolist() == [0] and plan.sources[1][0].numel() == 0
    # K(3, 2): the smaller side
    s, d = torch.cartesian_prod(torch.arange(3), torch.arange(3, 5)).t()
    plan = vertex_cover_plan(torch.stack([s, d]), torch.tensor([0, 0, 0, 1, 1]), 2)
    assert plan.rows_today[0, 1] == 3 and plan.targets[0][1].tolist() == [3, 4]


def test_no_cut_edges_and_empty_graph():
    edge_index = torch.tensor([[0, 1, 2, 2], [1, 0, 3, 2]])
    plan = vertex_cover_plan(edge_index, torch.tensor([0, 0, 1, 1, 2]), 3)
    assert plan.rows_today.sum() == 0 and plan.rows_cover.sum() == 0
    assert all(t.numel() == 0 for row in plan.sources + plan.targets for t in row)
    plan = vertex_cover_plan(torch.empty(2, 0, dtype=torch.long), torch.tensor([0, 1]), 2)
    assert plan.rows_cover.sum() == 0


def test_bad_parts_name_the_fix():
    with pytest.raises(ValueError, match="pass num_parts greater than every entry"):
        vertex_cover_plan(torch.tensor([[0], [1]]), torch.tensor([0, 2]), 2)
    with pytest.raises(ValueError, match=r"shape \[2, E\]"):
        vertex_cover_plan(torch.tensor([0, 1]), torch.tensor([0, 1]), 2)
