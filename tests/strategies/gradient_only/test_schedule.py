"""Groupings of clusters over ranks: balanced, disjoint, the same for a seed;
the sweep keeps base clusters and moves the others through every rank; the
inclusion probabilities against their formula and against counting."""
import pytest
import torch

from pyg_dist.strategies.gradient_only import groups, inclusion


@pytest.mark.parametrize("scheme", ["sweep", "random"])
def test_every_period_is_a_balanced_cover_and_the_same_for_a_seed(scheme):
    for period in range(12):
        grouping = groups(12, 3, period, scheme, seed=5)
        assert [len(g) for g in grouping] == [4, 4, 4]
        assert sorted(c for g in grouping for c in g) == list(range(12))
        assert grouping == groups(12, 3, period, scheme, seed=5)
    assert any(groups(12, 3, t, scheme, seed=5) != groups(12, 3, t, scheme, seed=6)
               for t in range(4))


def test_sweep_keeps_bases_and_moves_every_extra_through_every_rank():
    clusters, ranks = 12, 3
    seen = {c: set() for c in range(clusters)}
    for period in range(ranks):  # one sweep
        for rank, group in enumerate(groups(clusters, ranks, period, "sweep")):
            assert rank * 4 in group
            for c in group:
                seen[c].add(rank)
    assert all(seen[c] == {0, 1, 2} for c in range(clusters) if c % 4 != 0)


def test_random_inclusion_is_the_closed_form_and_matches_counting():
    clusters, ranks = 8, 2
    pi = inclusion(clusters, ranks, "random")
    assert torch.equal(pi.diagonal(), torch.ones(clusters, dtype=torch.float64))
    assert pi[0, 1] == pytest.approx(3 / 7)  # (m - 1) / (C - 1)
    together = torch.zeros(clusters, clusters)
    trials = 3000
    for period in range(trials):
        for group in groups(clusters, ranks, period, "random"):
            index = torch.tensor(group)
            together[index.unsqueeze(1), index.unsqueeze(0)] += 1
    off = ~torch.eye(clusters, dtype=torch.bool)
    error = 4 * (3 / 7 * 4 / 7 / trials) ** 0.5  # four standard errors
    assert ((together / trials)[off] - 3 / 7).abs().max() < error


def test_sweep_inclusion_counts_a_full_cycle():
    pi = inclusion(8, 2, "sweep")
    assert pi[0, 4] == 0.0  # two bases never meet
    assert torch.allclose(pi, pi.T)
    # each base meets each extra in half of the periods (2 ranks, 3 slots of 6)
    extras = [c for c in range(8) if c % 4]
    assert torch.allclose(pi[0, extras], torch.full((6,), 0.5, dtype=torch.float64))


def test_home_keeps_all_but_one_of_a_parts_clusters_and_visits_every_rank():
    clusters, ranks, m = 12, 3, 4
    seen = {c: set() for c in range(clusters)}
    for period in range(m * (ranks - 1)):  # one cycle
        grouping = groups(clusters, ranks, period, "home")
        assert sorted(c for g in grouping for c in g) == list(range(clusters))
        for rank, group in enumerate(grouping):
            assert len(group) == m and sum(c // m == rank for c in group) == m - 1
            seen.update({c: seen[c] | {rank} for c in group})
    assert all(seen[c] == {0, 1, 2} for c in range(clusters))
    pi = inclusion(clusters, ranks, "home")
    assert pi[0, 1] == pytest.approx((m - 2) / m)  # home clusters apart when one is away
    assert torch.allclose(pi, pi.T)
