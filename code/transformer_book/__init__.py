"""transformer_book: the shared package behind "Attention Is All You Need, built and trained
cell by cell". Each module holds one concept of the paper; chapters build each piece in the open,
check it against the version here, and import it from here afterwards."""

from transformer_book.utils import describe_hardware, get_device, set_seed

__all__ = ["describe_hardware", "get_device", "set_seed"]
__version__ = "0.1.0"
