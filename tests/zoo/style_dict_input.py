"""A from-scratch BERT with German names. Its forward takes one dict of inputs (`eingabe: dict`,
as a training loop hands over a collated batch); the float mask is made additive with finfo.min;
projections are torch.addmm on 2-D views, their biases stored apart (`verschiebung`); GELU (erf)
and LayerNorm are written by hand. Below it, models that must not pass."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Norm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.skala = nn.Parameter(torch.ones(dim))
        self.versatz = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        mittel = x.mean(-1, keepdim=True)
        varianz = (x - mittel).pow(2).mean(-1, keepdim=True)
        return (x - mittel) / torch.sqrt(varianz + self.eps) * self.skala + self.versatz


class Projektion(nn.Module):
    def __init__(self, ein, aus):
        super().__init__()
        self.gewicht = nn.Parameter(torch.randn(aus, ein) * 0.02)
        self.verschiebung = nn.Parameter(torch.zeros(aus))

    def forward(self, x):
        flach = x.reshape(-1, x.shape[-1])
        return torch.addmm(self.verschiebung, flach, self.gewicht.t()).view(*x.shape[:-1], -1)


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Schicht(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.koepfe = c.num_attention_heads
        self.abfrage, self.schluessel, self.wert = (
            Projektion(h, h),
            Projektion(h, h),
            Projektion(h, h),
        )
        self.ausgabe = Projektion(h, h)
        self.norm1 = Norm(h, c.layer_norm_eps)
        self.hoch, self.runter = (
            Projektion(h, c.intermediate_size),
            Projektion(c.intermediate_size, h),
        )
        self.norm2 = Norm(h, c.layer_norm_eps)

    def forward(self, x, maske):
        B, T, H = x.shape

        def teile(t):  # (B, T, H) -> (B, heads, T, head size)
            return t.view(B, T, self.koepfe, -1).transpose(1, 2)

        q, k, v = teile(self.abfrage(x)), teile(self.schluessel(x)), teile(self.wert(x))
        kontext = F.scaled_dot_product_attention(q, k, v, attn_mask=maske)
        x = self.norm1(x + self.ausgabe(kontext.transpose(1, 2).reshape(B, T, H)))
        return self.norm2(x + self.runter(gelu(self.hoch(x))))


class Kodierer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c.hidden_size
        self.wort = nn.Embedding(c.vocab_size, h)
        self.lage = nn.Embedding(c.max_position_embeddings, h)
        self.abschnitt = nn.Embedding(c.type_vocab_size, h)
        self.norm = Norm(h, c.layer_norm_eps)
        self.schichten = nn.ModuleList(Schicht(c) for _ in range(c.num_hidden_layers))
        self.buendel = Projektion(h, h)

    def forward(self, eingabe: dict):
        ids, m = eingabe["input_ids"], eingabe["attention_mask"].float()
        lage = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.wort(ids) + self.lage(lage) + self.abschnitt(eingabe["token_type_ids"]))
        maske = (1.0 - m[:, None, None, :]) * torch.finfo(x.dtype).min
        for schicht in self.schichten:
            x = schicht(x, maske)
        return {"zustand": x, "zusammenfassung": torch.tanh(self.buendel(x[:, 0]))}


class Verschoben(Kodierer):
    """Returns its last state moved by 1e-4: not what it computes."""

    def forward(self, eingabe: dict):
        out = super().forward(eingabe)
        return {"zustand": out["zustand"] + 1e-4, "zusammenfassung": out["zusammenfassung"]}


class OhneBuendel(Kodierer):
    """Its pooler dropped: the first token's state returned in its place."""

    def forward(self, eingabe: dict):
        out = super().forward(eingabe)
        return {"zustand": out["zustand"], "zusammenfassung": out["zustand"][:, 0]}


class Eps(Kodierer):
    """Each layer's second LayerNorm with an eps of its own."""

    def __init__(self, c):
        super().__init__(c)
        for schicht in self.schichten:
            schicht.norm2.eps = 1e-5
