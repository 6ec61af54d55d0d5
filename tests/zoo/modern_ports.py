"""From-scratch ModernBERT and NomicBERT, written the ways public ports write them (issue 47):
the fixtures bertconv's own model, tables and verify of these encoders will be held to.

Each port keeps names of its own and ships the loader such ports ship beside the model, from a
transformers model. tests/test_modern_ports.py proves each computes what transformers computes
on the same weights before bertconv is asked anything about them: a port that is wrong here
could make a right verdict look wrong.

- ModernBertPort: one fused qkv projection, rotary positions from cos/sin tables and a
  rotate-half function (the global base in global layers, the local one in local layers), a
  window written as a banded mask in the local layers (all but every third, the first global),
  LayerNorms before each
  sublayer (none before the first layer's attention: the embeddings' norm is it), a gated
  feed-forward (one matrix holding both halves), a final norm, no biases.
- ModernBertComplexPort: the same model with split q, k and v and the rotation computed with
  complex numbers (each head's two halves the real and imaginary parts, as the checkpoint rotates
  halves), the window applied by cutting the sequence into chunks of keys each query can reach.
- NomicBertPort: the names nomic-embed's checkpoints keep on the Hub (`emb_ln`, `attn.Wqkv`,
  `mlp.fc11` up, `mlp.fc12` gate, `mlp.fc2`, `norm1`, `norm2`), rotary positions, SwiGLU, token
  types, LayerNorms after each sublayer (BERT's placement), no biases.

`modernbert_mistaken` and `nomic_mistaken` give the same ports with one of the mistakes issue 47
names (rotation of interleaved pairs, another base, the global base in local layers, the window
off by one or in every layer, gate and up swapped, a bias the checkpoint has none of, the first
layer's attention norm applied twice, the final norm missing): each moves the output (tested),
for verify to find and name.
"""

import torch
import torch.nn.functional as F
from torch import nn

NEG = torch.finfo(torch.float32).min  # a hidden key's score: finite, so no row is all NaN


def rotary_tables(head_dim: int, theta: float, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angle for each frequency, the frequencies repeated for the
    two halves of a head: (length, head_dim) each."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)
    angles = torch.arange(length, dtype=torch.float)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return (x.float() * cos + rotate_half(x.float()) * sin).to(x.dtype)


def additive(mask: torch.Tensor) -> torch.Tensor:
    """A boolean mask of allowed (query, key) pairs as scores to add."""
    return torch.zeros(mask.shape).masked_fill(~mask, NEG)


# ModernBERT, as a port with one fused projection and rotate-half ----------------------------


class ModernBlock(nn.Module):
    turn = staticmethod(rotate)

    def __init__(self, cfg: dict, index: int):
        super().__init__()
        d, self.heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.hd = d // self.heads
        eps = cfg["norm_eps"]
        self.ln_attn = nn.Identity() if index == 0 else nn.LayerNorm(d, eps=eps, bias=False)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln_mlp = nn.LayerNorm(d, eps=eps, bias=False)
        self.wi = nn.Linear(d, 2 * cfg["intermediate_size"], bias=False)
        self.wo = nn.Linear(cfg["intermediate_size"], d, bias=False)
        local = index % cfg["global_attn_every_n_layers"] != 0
        self.window = cfg["local_attention"] // 2 if local else None
        theta = cfg["local_rope_theta"] if local else cfg["global_rope_theta"]
        cos, sin = rotary_tables(self.hd, theta, cfg["max_position_embeddings"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        h = self.ln_attn(x)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, self.hd).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = self.turn(q, self.cos[:T], self.sin[:T]), self.turn(k, self.cos[:T], self.sin[:T])
        allowed = keys[:, None, None, :]
        if self.window is not None:
            position = torch.arange(T)
            allowed = allowed & ((position[:, None] - position[None, :]).abs() <= self.window)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=additive(allowed))
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, d))
        return x + self.mlp(self.ln_mlp(x))

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        up, gate = self.wi(h).chunk(2, dim=-1)
        return self.wo(F.gelu(up) * gate)


class ModernBertPort(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d = cfg["hidden_size"]
        self.tok = nn.Embedding(cfg["vocab_size"], d)
        self.ln_emb = nn.LayerNorm(d, eps=cfg["norm_eps"], bias=False)
        self.blocks = nn.ModuleList(ModernBlock(cfg, i) for i in range(cfg["num_hidden_layers"]))
        self.ln_final = nn.LayerNorm(d, eps=cfg["norm_eps"], bias=False)

    def forward(self, input_ids, attention_mask=None):
        keys = torch.ones_like(input_ids, dtype=torch.bool)
        keys = keys if attention_mask is None else attention_mask.bool()
        x = self.ln_emb(self.tok(input_ids))
        for block in self.blocks:
            x = block(x, keys)
        return self.ln_final(x)


def modernbert_config(hf_config) -> dict:
    """The port's config from transformers' ModernBertConfig."""
    rope = hf_config.rope_parameters
    return {
        "vocab_size": hf_config.vocab_size,
        "hidden_size": hf_config.hidden_size,
        "num_hidden_layers": hf_config.num_hidden_layers,
        "num_attention_heads": hf_config.num_attention_heads,
        "intermediate_size": hf_config.intermediate_size,
        "norm_eps": hf_config.norm_eps,
        "local_attention": hf_config.local_attention,
        "global_attn_every_n_layers": hf_config.global_attn_every_n_layers,
        "global_rope_theta": rope["full_attention"]["rope_theta"],
        "local_rope_theta": rope["sliding_attention"]["rope_theta"],
        "max_position_embeddings": hf_config.max_position_embeddings,
    }


def modernbert_from_transformers(hf_model) -> ModernBertPort:
    """The port holding a transformers ModernBertModel's weights."""
    port = ModernBertPort(modernbert_config(hf_model.config))
    names = {
        "embeddings.tok_embeddings.weight": "tok.weight",
        "embeddings.norm.weight": "ln_emb.weight",
        "final_norm.weight": "ln_final.weight",
    }
    for i in range(hf_model.config.num_hidden_layers):
        pairs = [("attn_norm", "ln_attn"), ("attn.Wqkv", "qkv"), ("attn.Wo", "proj"),
                 ("mlp_norm", "ln_mlp"), ("mlp.Wi", "wi"), ("mlp.Wo", "wo")]  # fmt: skip
        for theirs, ours in pairs:
            names[f"layers.{i}.{theirs}.weight"] = f"blocks.{i}.{ours}.weight"
    state = {names[k]: v for k, v in hf_model.state_dict().items() if k in names}
    port.load_state_dict(state, strict=True)
    return port.eval()


# ModernBERT, as a port with split projections, complex rotation and chunked windows ----------


class ComplexAttention(nn.Module):
    def __init__(self, cfg: dict, local: bool):
        super().__init__()
        d, self.heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.hd = d // self.heads
        self.q, self.k, self.v = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.out = nn.Linear(d, d, bias=False)
        self.window = cfg["local_attention"] // 2 if local else None
        theta = cfg["local_rope_theta"] if local else cfg["global_rope_theta"]
        inv_freq = 1.0 / theta ** (torch.arange(0, self.hd, 2, dtype=torch.float) / self.hd)
        angles = torch.outer(torch.arange(cfg["max_position_embeddings"]).float(), inv_freq)
        self.register_buffer("turn", torch.polar(torch.ones_like(angles), angles), persistent=False)

    def spin(self, x: torch.Tensor) -> torch.Tensor:
        """Each head's first half the real parts, its second the imaginary ones, turned by its
        position's angles."""
        T, half = x.shape[2], self.hd // 2
        z = torch.complex(x[..., :half].float(), x[..., half:].float()) * self.turn[:T]
        return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)

    def forward(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape

        def heads(t):
            return t.view(B, T, self.heads, self.hd).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        q, k = self.spin(q), self.spin(k)
        if self.window is None:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=additive(keys[:, None, None]))
        else:
            a = self.chunked(q, k, v, keys)
        return self.out(a.transpose(1, 2).reshape(B, T, d))

    def chunked(self, q, k, v, keys) -> torch.Tensor:
        """The window as chunks: each chunk of queries against the keys it can reach."""
        T, w, size = q.shape[2], self.window, max(self.window, 1)
        parts = []
        for start in range(0, T, size):
            stop = min(start + size, T)
            low, high = max(0, start - w), min(T, stop + w)
            position = torch.arange(start, stop)[:, None] - torch.arange(low, high)[None, :]
            allowed = keys[:, None, None, low:high] & (position.abs() <= w)
            parts.append(
                F.scaled_dot_product_attention(
                    q[:, :, start:stop],
                    k[:, :, low:high],
                    v[:, :, low:high],
                    attn_mask=additive(allowed),
                )  # fmt: skip
            )
        return torch.cat(parts, dim=2)


class ComplexBlock(nn.Module):
    def __init__(self, cfg: dict, index: int):
        super().__init__()
        d, eps = cfg["hidden_size"], cfg["norm_eps"]
        self.norm1 = None if index == 0 else nn.LayerNorm(d, eps=eps, bias=False)
        local = index % cfg["global_attn_every_n_layers"] != 0
        self.attention = ComplexAttention(cfg, local)
        self.norm2 = nn.LayerNorm(d, eps=eps, bias=False)
        self.gate_up = nn.Linear(d, 2 * cfg["intermediate_size"], bias=False)
        self.down = nn.Linear(cfg["intermediate_size"], d, bias=False)

    def forward(self, x, keys):
        x = x + self.attention(x if self.norm1 is None else self.norm1(x), keys)
        up, gate = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.gelu(up) * gate)


class ModernBertComplexPort(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d = cfg["hidden_size"]
        self.embed = nn.Embedding(cfg["vocab_size"], d)
        self.embed_norm = nn.LayerNorm(d, eps=cfg["norm_eps"], bias=False)
        self.layers = nn.ModuleList(ComplexBlock(cfg, i) for i in range(cfg["num_hidden_layers"]))
        self.norm = nn.LayerNorm(d, eps=cfg["norm_eps"], bias=False)

    def forward(self, input_ids, attention_mask=None):
        keys = torch.ones_like(input_ids, dtype=torch.bool)
        keys = keys if attention_mask is None else attention_mask.bool()
        x = self.embed_norm(self.embed(input_ids))
        for layer in self.layers:
            x = layer(x, keys)
        return self.norm(x)


def modernbert_complex_from_transformers(hf_model) -> ModernBertComplexPort:
    """The complex port holding a transformers ModernBertModel's weights (Wqkv cut in three)."""
    port = ModernBertComplexPort(modernbert_config(hf_model.config))
    theirs = hf_model.state_dict()
    state = {
        "embed.weight": theirs["embeddings.tok_embeddings.weight"],
        "embed_norm.weight": theirs["embeddings.norm.weight"],
        "norm.weight": theirs["final_norm.weight"],
    }
    for i in range(hf_model.config.num_hidden_layers):
        parts = theirs[f"layers.{i}.attn.Wqkv.weight"].chunk(3)
        state |= {f"layers.{i}.attention.{n}.weight": w for n, w in zip("qkv", parts, strict=True)}
        state[f"layers.{i}.attention.out.weight"] = theirs[f"layers.{i}.attn.Wo.weight"]
        if i:
            state[f"layers.{i}.norm1.weight"] = theirs[f"layers.{i}.attn_norm.weight"]
        state[f"layers.{i}.norm2.weight"] = theirs[f"layers.{i}.mlp_norm.weight"]
        state[f"layers.{i}.gate_up.weight"] = theirs[f"layers.{i}.mlp.Wi.weight"]
        state[f"layers.{i}.down.weight"] = theirs[f"layers.{i}.mlp.Wo.weight"]
    port.load_state_dict(state, strict=True)
    return port.eval()


# NomicBERT, under the names its checkpoints keep on the Hub ----------------------------------


class NomicAttention(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d, self.heads = cfg["n_embd"], cfg["n_head"]
        self.hd = d // self.heads
        self.Wqkv = nn.Linear(d, 3 * d, bias=False)
        self.out_proj = nn.Linear(d, d, bias=False)
        cos, sin = rotary_tables(self.hd, cfg["rotary_emb_base"], cfg["n_positions"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x, keys):
        B, T, d = x.shape
        q, k, v = self.Wqkv(x).view(B, T, 3, self.heads, self.hd).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = rotate(q, self.cos[:T], self.sin[:T]), rotate(k, self.cos[:T], self.sin[:T])
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=additive(keys[:, None, None]))
        return self.out_proj(a.transpose(1, 2).reshape(B, T, d))


class NomicMLP(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d, inner = cfg["n_embd"], cfg["n_inner"]
        self.fc11 = nn.Linear(d, inner, bias=False)  # up
        self.fc12 = nn.Linear(d, inner, bias=False)  # gate
        self.fc2 = nn.Linear(inner, d, bias=False)

    def forward(self, x):
        return self.fc2(self.fc11(x) * F.silu(self.fc12(x)))


class NomicBlock(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.attn = NomicAttention(cfg)
        self.norm1 = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])
        self.mlp = NomicMLP(cfg)
        self.norm2 = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])

    def forward(self, x, keys):
        x = self.norm1(x + self.attn(x, keys))
        return self.norm2(x + self.mlp(x))


class NomicEncoder(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.layers = nn.ModuleList(NomicBlock(cfg) for _ in range(cfg["n_layer"]))


class NomicEmbeddings(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.token_type_embeddings = nn.Embedding(cfg["type_vocab_size"], cfg["n_embd"])


class NomicBertPort(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.embeddings = NomicEmbeddings(cfg)
        self.emb_ln = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])
        self.encoder = NomicEncoder(cfg)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        keys = torch.ones_like(input_ids, dtype=torch.bool)
        keys = keys if attention_mask is None else attention_mask.bool()
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        e = self.embeddings
        x = self.emb_ln(e.word_embeddings(input_ids) + e.token_type_embeddings(types))
        for layer in self.encoder.layers:
            x = layer(x, keys)
        return x


def nomic_config(hf_config) -> dict:
    """nomic-embed's own config.json fields, from transformers' NomicBertConfig."""
    return {
        "vocab_size": hf_config.vocab_size,
        "n_embd": hf_config.hidden_size,
        "n_layer": hf_config.num_hidden_layers,
        "n_head": hf_config.num_attention_heads,
        "n_inner": hf_config.intermediate_size,
        "n_positions": hf_config.max_position_embeddings,
        "type_vocab_size": hf_config.type_vocab_size,
        "layer_norm_epsilon": hf_config.layer_norm_eps,
        "rotary_emb_base": hf_config.rope_parameters["rope_theta"],
    }


def nomic_from_transformers(hf_model) -> NomicBertPort:
    """The port holding a transformers NomicBertModel's weights, renamed back as the Hub's
    checkpoints are named (q, k and v joined into Wqkv)."""
    port = NomicBertPort(nomic_config(hf_model.config))
    theirs = hf_model.state_dict()
    state = {
        "embeddings.word_embeddings.weight": theirs["embeddings.word_embeddings.weight"],
        "embeddings.token_type_embeddings.weight": theirs[
            "embeddings.token_type_embeddings.weight"
        ],
        "emb_ln.weight": theirs["embeddings.LayerNorm.weight"],
        "emb_ln.bias": theirs["embeddings.LayerNorm.bias"],
    }
    for i in range(hf_model.config.num_hidden_layers):
        hf, ours = f"layers.{i}.", f"encoder.layers.{i}."
        qkv = [theirs[f"{hf}self_attn.{p}_proj.weight"] for p in "qkv"]
        state[f"{ours}attn.Wqkv.weight"] = torch.cat(qkv)
        state[f"{ours}attn.out_proj.weight"] = theirs[f"{hf}self_attn.o_proj.weight"]
        state[f"{ours}mlp.fc11.weight"] = theirs[f"{hf}mlp.up_proj.weight"]
        state[f"{ours}mlp.fc12.weight"] = theirs[f"{hf}mlp.gate_proj.weight"]
        state[f"{ours}mlp.fc2.weight"] = theirs[f"{hf}mlp.down_proj.weight"]
        for norm, name in (("norm1", "post_attention_layernorm"), ("norm2", "post_mlp_layernorm")):
            for p in ("weight", "bias"):
                state[f"{ours}{norm}.{p}"] = theirs[f"{hf}{name}.{p}"]
    port.load_state_dict(state, strict=True)
    return port.eval()


# The mistakes ports make, each a port that differs from its checkpoint in one way -------------


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotation of interleaved pairs (x0, x1), (x2, x3), ... (GPT-J's, LLaMA's original code),
    where the checkpoint rotates halves: the tables' first half gives each pair its angle."""
    half = x.shape[-1] // 2
    pairs = x.float().unflatten(-1, (half, 2))
    c, s = cos[..., :half, None], sin[..., :half, None]
    turned = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1)
    return (pairs * c + turned * s).flatten(-2).to(x.dtype)


def _retabled(port: ModernBertPort, theta_of) -> ModernBertPort:
    for block in port.blocks:
        theta = theta_of(block)
        if theta is not None:
            block.cos, block.sin = rotary_tables(block.hd, theta, len(block.cos))
    return port


def _swapped_halves(linear: nn.Linear) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.cat(linear.weight.chunk(2)[::-1]))


class InterleavedBlock(ModernBlock):
    turn = staticmethod(rotate_interleaved)


def modernbert_mistaken(hf_model, mistake: str) -> ModernBertPort:
    """The rotate-half port holding `hf_model`'s weights, with one mistake ports make."""
    port = modernbert_from_transformers(hf_model)
    cfg = modernbert_config(hf_model.config)
    if mistake == "interleaved":
        for block in port.blocks:
            block.__class__ = InterleavedBlock
    elif mistake == "another_base":  # BERT-era ports' 10000 in the global layers
        _retabled(port, lambda b: 10000.0 if b.window is None else None)
    elif mistake == "global_base_in_local_layers":
        _retabled(port, lambda b: cfg["global_rope_theta"] if b.window is not None else None)
    elif mistake == "window_off_by_one":  # the whole window taken as each side's reach
        for block in port.blocks:
            block.window = block.window + 1 if block.window is not None else None
    elif mistake == "window_in_every_layer":
        for block in port.blocks:
            block.window = cfg["local_attention"] // 2
    elif mistake == "gate_and_up_swapped":
        for block in port.blocks:
            _swapped_halves(block.wi)
    elif mistake == "bias_added":  # a bias the checkpoint has none of, left at its init
        for block in port.blocks:
            block.qkv.bias = nn.Parameter(torch.randn(block.qkv.out_features) * 0.1)
    elif mistake == "first_attention_norm_twice":  # a LayerNorm at its init before layer 0
        port.blocks[0].ln_attn = nn.LayerNorm(cfg["hidden_size"], eps=cfg["norm_eps"])
    elif mistake == "final_norm_missing":
        port.ln_final = nn.Identity()
    else:
        raise ValueError(f"no such mistake: {mistake}")
    return port.eval()


MODERNBERT_MISTAKES = (
    "interleaved", "another_base", "global_base_in_local_layers", "window_off_by_one",
    "window_in_every_layer", "gate_and_up_swapped", "bias_added", "first_attention_norm_twice",
    "final_norm_missing",
)  # fmt: skip


def nomic_mistaken(hf_model, mistake: str) -> NomicBertPort:
    """The NomicBERT port holding `hf_model`'s weights, with one mistake ports make."""
    port = nomic_from_transformers(hf_model)
    layers = port.encoder.layers
    if mistake == "gate_and_up_swapped":
        for layer in layers:
            with torch.no_grad():
                up = layer.mlp.fc11.weight.clone()
                layer.mlp.fc11.weight.copy_(layer.mlp.fc12.weight)
                layer.mlp.fc12.weight.copy_(up)
    elif mistake == "another_base":  # 10000, BERT-era rotary's, for nomic's 1000
        for layer in layers:
            a = layer.attn
            a.cos, a.sin = rotary_tables(a.hd, 10000.0, len(a.cos))
    elif mistake == "bias_added":
        for layer in layers:
            layer.attn.Wqkv.bias = nn.Parameter(torch.randn(layer.attn.Wqkv.out_features) * 0.1)
    else:
        raise ValueError(f"no such mistake: {mistake}")
    return port.eval()


NOMIC_MISTAKES = ("gate_and_up_swapped", "another_base", "bias_added")


# Built from config.json, as verify --model and infer build a user's model ---------------------


def _from_json(config) -> dict:
    """The ports' config from a ModernBERT config.json (rope_parameters' two bases)."""
    rope = config["rope_parameters"]
    return {
        **dict(config),
        "global_rope_theta": rope["full_attention"]["rope_theta"],
        "local_rope_theta": rope["sliding_attention"]["rope_theta"],
    }


def modernbert(config) -> ModernBertPort:
    return ModernBertPort(_from_json(config))


def modernbert_complex(config) -> ModernBertComplexPort:
    return ModernBertComplexPort(_from_json(config))


def nomic(config) -> NomicBertPort:
    return NomicBertPort({
        "vocab_size": config["vocab_size"], "n_embd": config["hidden_size"],
        "n_layer": config["num_hidden_layers"], "n_head": config["num_attention_heads"],
        "n_inner": config["intermediate_size"], "n_positions": config["max_position_embeddings"],
        "type_vocab_size": config["type_vocab_size"],
        "layer_norm_epsilon": config["layer_norm_eps"],
        "rotary_emb_base": config["rope_parameters"]["rope_theta"],
    })  # fmt: skip


class SwappedBlock(ModernBlock):
    """The activation on the half the checkpoint multiplies by."""

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        gate, up = self.wi(h).chunk(2, dim=-1)
        return self.wo(F.gelu(up) * gate)


class ShortcutBlock(ModernBlock):
    """Global attention on a sequence no longer than the window's width (local_attention):
    wrong wherever two of its tokens are farther apart than the window reaches either way."""

    def forward(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        window = self.window
        short = window is not None and x.shape[1] < 2 * window  # 2 * reach: the width
        self.window = None if short else window
        try:
            return super().forward(x, keys)
        finally:
            self.window = window


def modernbert_mistaken_in_code(mistake: str):
    """A factory of the rotate-half port built from config.json with `mistake` in its code (as
    verify --model builds it: the checkpoint's weights loaded after)."""

    def make(config) -> ModernBertPort:
        port = modernbert(config)
        cfg = _from_json(config)
        if mistake == "interleaved":
            for block in port.blocks:
                block.__class__ = InterleavedBlock
        elif mistake == "another_base":
            _retabled(port, lambda b: 10000.0 if b.window is None else None)
        elif mistake == "global_base_in_local_layers":
            _retabled(port, lambda b: cfg["global_rope_theta"] if b.window is not None else None)
        elif mistake == "window_off_by_one":
            for block in port.blocks:
                block.window = block.window + 1 if block.window is not None else None
        elif mistake == "window_in_every_layer":
            for block in port.blocks:
                block.window = cfg["local_attention"] // 2
        elif mistake == "gate_and_up_swapped":
            for block in port.blocks:
                block.__class__ = SwappedBlock
        elif mistake == "bias_added":
            for block in port.blocks:
                block.qkv = nn.Linear(cfg["hidden_size"], 3 * cfg["hidden_size"], bias=True)
        elif mistake == "first_attention_norm_twice":  # the embeddings' norm, again
            port.blocks[0].ln_attn = port.ln_emb
        elif mistake == "final_norm_missing":
            port.ln_final.forward = lambda x: x
        elif mistake == "final_norm_removed":  # no module, no weight
            port.ln_final = nn.Identity()
        elif mistake == "base_12000":  # a base no list of published ones holds
            _retabled(port, lambda b: 12000.0 if b.window is None else None)
        elif mistake == "no_window_when_short":  # "a sequence within the window needs none"
            for block in port.blocks:
                block.__class__ = ShortcutBlock
        else:
            raise ValueError(f"no such mistake: {mistake}")
        return port

    return make


class SwappedNomicMLP(NomicMLP):
    """silu on fc11, the half the checkpoint multiplies by."""

    def forward(self, x):
        return self.fc2(self.fc12(x) * F.silu(self.fc11(x)))


def nomic_mistaken_in_code(mistake: str):
    """A factory of the NomicBERT port built from config.json with `mistake` in its code."""

    def make(config) -> NomicBertPort:
        port = nomic(config)
        for layer in port.encoder.layers:
            if mistake == "gate_and_up_swapped":
                layer.mlp.__class__ = SwappedNomicMLP
            elif mistake == "another_base":
                a = layer.attn
                a.cos, a.sin = rotary_tables(a.hd, 10000.0, len(a.cos))
            elif mistake == "bias_added":
                layer.attn.Wqkv = nn.Linear(a_in := layer.attn.Wqkv.in_features, 3 * a_in)
            else:
                raise ValueError(f"no such mistake: {mistake}")
        return port

    return make


class ModernBertMLMPort(ModernBertPort):
    """The rotate-half port with ModernBERT's masked-LM head: a dense layer, GELU and a norm
    (no biases), then the word embeddings as the decoder, with a bias of its own."""

    def __init__(self, cfg: dict):
        super().__init__(cfg)
        d = cfg["hidden_size"]
        self.head_dense = nn.Linear(d, d, bias=False)
        self.head_norm = nn.LayerNorm(d, eps=cfg["norm_eps"], bias=False)
        self.decoder_bias = nn.Parameter(torch.zeros(cfg["vocab_size"]))

    def forward(self, input_ids, attention_mask=None):
        h = super().forward(input_ids, attention_mask)
        x = self.head_norm(F.gelu(self.head_dense(h)))
        return {"last_hidden_state": h, "logits": F.linear(x, self.tok.weight, self.decoder_bias)}


def modernbert_mlm(config) -> ModernBertMLMPort:
    return ModernBertMLMPort(_from_json(config))
