# Sourced by setup.sh and demo.sh: the versions CI is known to pass with (the
# package itself asks only for ranges). TORCH may name another torch.
TORCH="${TORCH:-torch==2.13.0}"
PYG_PIN="torch_geometric==2.8.1"
PYMETIS_PIN="pymetis==2025.2.2"
