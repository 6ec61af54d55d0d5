"""Write a BERT checkpoint of a real shape with random weights, the way transformers writes them.

    python bench/make_checkpoint.py --shape base --out /tmp/bert-base [--heads] [--legacy]

Used for benchmarks and for parity runs at full size where no real checkpoint can be downloaded.
"""

import argparse
from pathlib import Path

import torch
from transformers import BertConfig, BertForPreTraining, BertModel

SHAPES = {
    "base": dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
    ),
    "large": dict(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="base")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--heads", action="store_true", help="BertForPreTraining, with the MLM and NSP heads"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    config = BertConfig(vocab_size=30522, **SHAPES[args.shape])
    model = (BertForPreTraining if args.heads else BertModel)(config)
    model.save_pretrained(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
