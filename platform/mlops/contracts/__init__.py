"""The bundled example contracts (YAML beside this file). Importing this names them and loads nothing."""

from pathlib import Path

CONTRACTS_DIR = Path(__file__).parent
# The default contract: the card-transactions example.
BUNDLED_CONTRACT = CONTRACTS_DIR / "fraud.yaml"
