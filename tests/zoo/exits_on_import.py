"""A training script that parses its own arguments when imported."""

import argparse

from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
args = parser.parse_args()


class Bert(nn.Module):
    pass
