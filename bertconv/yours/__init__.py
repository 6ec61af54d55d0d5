"""Your own BERT: a from-scratch model of the user's, run with no change to its code.

- `harness`: import it, build it from config.json, call its forward the way it asks;
- `trace`: what its forward computes, at the level of torch calls;
- `reading`: each compared output read from that trace, where the model computes it;
- `units`, `assign`, `infer`: the table of its names, inferred from how its forward uses them;
- `diagnose`: where and why it differs from BERT, each step recomputed by bertconv's model.
"""
