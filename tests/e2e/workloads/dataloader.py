"""The PyTorch DataLoader reproduction: 4 workers returning 3 MiB tensors in
batches of 16 put ~384 MiB in flight through /dev/shm; under Docker's 64 MiB
default a worker dies with "Bus error"."""
import torch
from torch.utils.data import DataLoader, Dataset


class Tensors(Dataset):
    def __len__(self):
        return 16 * 4 * 4

    def __getitem__(self, i):
        return torch.full((3 * 1024 * 1024 // 4,), float(i))  # 3 MiB of float32


if __name__ == "__main__":
    total = 0
    for batch in DataLoader(Tensors(), batch_size=16, num_workers=4):
        total += batch.shape[0]
    print(f"DATALOADER OK {total} samples")
