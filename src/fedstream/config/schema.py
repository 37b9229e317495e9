"""The config keys of fedstream: their types, defaults, allowed values and meaning.

Key names are a public contract (they appear in config files, ``--set`` and ``summary.json``).
Every key is validated before any work starts; see :func:`fedstream.config.load_config`.
"""

from __future__ import annotations

from fedstream.fields import Field

TASKS = ("ovfl", "vfl", "chfl")
OVFL, VFL, CHFL = ("ovfl",), ("vfl",), ("chfl",)
DATASETS_BY_TASK = {
    "ovfl": ("imnist", "mnist", "fashion-mnist", "higgs", "susy"),
    "vfl": ("mnist", "fashion-mnist", "cifar10"),
    "chfl": ("covertype", "covertype-uci", "sensorless", "jannis", "helena", "aloi"),
}
DATASETS = tuple(dict.fromkeys(d for names in DATASETS_BY_TASK.values() for d in names))

SCHEMA: dict[str, Field] = {
    "task": Field(
        str,
        "ovfl",
        "what to run: ovfl = event-driven online vertical FL, vfl = batch vertical FL "
        "(with compression), chfl = continual horizontal FL",
        choices=TASKS,
    ),
    "seed": Field(int, 0, "seed of models, data order, splits and activation draws", min=0),
    "data.name": Field(
        str,
        "imnist",
        "the dataset (which ones depends on the task)",
        choices=DATASETS,
        task_defaults=(("vfl", "mnist"), ("chfl", "covertype")),
    ),
    "data.root": Field(
        str, None, "data folder (else $FEDSTREAM_DATA, ./data, ../shared/data)", optional=True
    ),
    # -- online VFL (task = ovfl) ----------------------------------------------------------------
    "rounds": Field(int, 20000, "number of rounds (one sample per round)", min=1, tasks=OVFL),
    "data.stats_rows": Field(
        int, 10000, "rows used for the standardisation statistics (tabular data)", min=1, tasks=OVFL
    ),
    "stream.drift": Field(
        str, "none", "non-stationarity of the stream", choices=("none", "class-prior"), tasks=OVFL
    ),
    "stream.drift_every": Field(int, 50, "rounds between class-prior redraws", min=1, tasks=OVFL),
    "vfl.clients": Field(
        int, 4, "number of clients M (equal contiguous feature blocks)", min=1, tasks=("ovfl", "vfl")
    ),
    "model.embedding": Field(
        int,
        64,
        "width of each client's embedding (vfl: none = the paper's, 128 or 16)",
        min=1,
        max=65535,
        tasks=("ovfl", "vfl"),
        task_defaults=(("vfl", None),),
    ),
    "optimizer.name": Field(
        str, "dlr", "update rule of every party", choices=("ogd", "slr", "dlr"), tasks=OVFL
    ),
    "optimizer.lr": Field(
        float,
        0.01,
        "learning rate of the clients (and of the server unless server_lr); "
        "vfl: none = the paper's (0.01, CIFAR-10 0.001)",
        min=0.0,
        exclusive_min=True,
        tasks=("ovfl", "vfl"),
        task_defaults=(("vfl", None),),
    ),
    "optimizer.server_lr": Field(
        float,
        None,
        "learning rate of the server (default: optimizer.lr)",
        min=0.0,
        exclusive_min=True,
        optional=True,
        tasks=OVFL,
    ),
    "optimizer.window": Field(int, 10, "window length l of SLR and DLR", min=1, max=65535, tasks=OVFL),
    "optimizer.alpha": Field(
        float,
        0.95,
        "DLR's attenuation coefficient alpha (paper: 0 < alpha < 1)",
        min=0.0,
        max=1.0,
        exclusive_min=True,
        exclusive_max=True,
        tasks=OVFL,
    ),
    "activation.name": Field(
        str,
        "full",
        "which clients an event activates (topl: the l best by an online KNN-MI estimate)",
        choices=("full", "random", "event", "fixed", "topl"),
        tasks=OVFL,
    ),
    "activation.p": Field(
        float, 0.5, "Random: activation probability of each client", min=0.0, max=1.0, tasks=OVFL
    ),
    "activation.threshold": Field(
        float, 0.2, "Event: threshold Γ on the mean standardised feature", tasks=OVFL
    ),
    "activation.k": Field(int, 2, "Fixed: number of clients activated per round", min=0, tasks=OVFL),
    "activation.l": Field(int, 2, "topl: number of clients activated per round", min=1, tasks=OVFL),
    "activation.window": Field(
        int,
        500,
        "topl: latest exploration rounds (every client sent) scored by group testing",
        min=20,
        max=4096,
        tasks=OVFL,
    ),
    "activation.explore": Field(
        int,
        10,
        "topl: every this many rounds all clients are activated, which keeps the "
        "estimate alive (1: every round)",
        min=1,
        tasks=OVFL,
    ),
    "activation.padding": Field(
        str,
        "mean",
        "topl: what the server uses for clients it does not query",
        choices=("zero", "mean", "latest", "ema"),
        tasks=OVFL,
    ),
    "eval.interval": Field(int, 20000, "rounds per reported prequential error", min=1, tasks=OVFL),
    "checkpoint.every": Field(
        int, 10000, "rounds between checkpoints when --out is given (0: only at the end)", min=0, tasks=OVFL
    ),
    "network.batch": Field(
        int,
        1,
        "deploy: events per message to a client node (1: the exact per-event algorithm; "
        "B > 1: embeddings of B events computed with the weights of the batch's start)",
        min=1,
        max=4096,
        tasks=OVFL,
    ),
    "network.padding": Field(
        str,
        "zero",
        "deploy: the embedding the server uses for a client node that is down "
        "(crashed, hung, disconnected, or sent an invalid reply)",
        choices=("zero", "mean", "latest", "ema"),
        tasks=OVFL,
    ),
    # -- batch VFL with compression (task = vfl) ---------------------------------------------------
    "train.epochs": Field(int, 10, "passes over the training set", min=1, tasks=VFL),
    "train.batch_size": Field(int, 100, "samples per mini-batch (paper: 100)", min=1, max=65535, tasks=VFL),
    "model.hidden": Field(
        int, 256, "hidden width of the MNIST-like client MLPs (and of the server's)", min=1, tasks=VFL
    ),
    "model.server_hidden": Field(
        int,
        None,
        "hidden width of the MNIST-like server MLP (none: model.hidden)",
        min=1,
        optional=True,
        tasks=VFL,
    ),
    "vfl.split": Field(
        str,
        "rows",
        "each client's strip of every image: consecutive pixel rows or columns",
        choices=("rows", "columns"),
        tasks=VFL,
    ),
    "model.resnet_width": Field(
        int, 64, "base channels of the CIFAR-10 clients' ResNet-18", min=1, tasks=VFL
    ),
    "data.train_rows": Field(
        int, None, "use only the first rows of the training set", min=1, optional=True, tasks=VFL
    ),
    "data.test_rows": Field(
        int, None, "use only the first rows of the test set", min=1, optional=True, tasks=VFL
    ),
    "compression.up": Field(
        str,
        "none",
        "embedding codec: top-k by magnitude or ranked by the last gradient",
        choices=("none", "topk", "topk-grad"),
        tasks=("ovfl", "vfl"),
    ),
    "compression.cache": Field(
        bool, False, "the server fills unsent embedding entries from its cache", tasks=("ovfl", "vfl")
    ),
    "compression.ratio": Field(
        float,
        0.125,
        "fraction k/n of each embedding row sent (paper: 0.125)",
        min=0.0,
        max=1.0,
        exclusive_min=True,
        tasks=("ovfl", "vfl"),
    ),
    "compression.down": Field(
        str,
        "none",
        "gradient codec: signSGD (+-1, or scaled by mean |g|) or 3-sigma quantisation + Huffman",
        choices=("none", "sign", "sign-scaled", "quant-huffman"),
        tasks=("ovfl", "vfl"),
    ),
    "compression.levels": Field(
        int, 24, "quantisation intervals P (paper: 24)", min=1, max=254, tasks=("ovfl", "vfl")
    ),
    # -- participant selection in batch VFL (task = vfl; the Dynamic VF-PS report) ---------------------
    "selection.method": Field(
        str,
        "all",
        "which clients send: all, vfps (KNN-MI group testing, top l), random "
        "(random picking), fixed (selection.clients)",
        choices=("all", "vfps", "random", "fixed"),
        tasks=VFL,
    ),
    "selection.l": Field(int, 3, "clients kept by vfps and random (paper: 3 of 4)", min=1, tasks=VFL),
    "selection.clients": Field(
        str,
        None,
        'fixed: the selected clients, comma-separated (e.g. "0,2"); a grid over subsets is the brute force',
        optional=True,
        tasks=VFL,
    ),
    "selection.k": Field(int, 10, "vfps: neighbours K of the KNN MI estimate", min=1, tasks=VFL),
    "selection.groups": Field(
        int, 10, "vfps: random groups of group testing (plus the full set)", min=1, tasks=VFL
    ),
    "selection.aggregate": Field(
        str,
        "sum",
        "vfps: a client's score from its groups' MI: sum (the VF-PS reference "
        "code) or mean (the Dynamic VF-PS report's wording)",
        choices=("sum", "mean"),
        tasks=VFL,
    ),
    "selection.queries": Field(
        int,
        None,
        "vfps: query samples drawn for eq. (1) (none: every available row)",
        min=1,
        optional=True,
        tasks=VFL,
    ),
    "selection.padding": Field(
        str,
        "zero",
        "what the server uses for unselected clients' embeddings",
        choices=("zero", "mean", "latest", "ema"),
        tasks=VFL,
    ),
    "selection.ema_alpha": Field(
        float, 0.1, "ema padding: weight of the newest row", min=0.0, max=1.0, exclusive_min=True, tasks=VFL
    ),
    "selection.dynamic": Field(
        str,
        "none",
        "available training data: none (all rows), discrete (redrawn subsets), "
        "relaxed (lifespans and arrivals)",
        choices=("none", "discrete", "relaxed"),
        tasks=VFL,
    ),
    "selection.update_prob": Field(
        float,
        0.2,
        "discrete: probability per epoch that the subset is redrawn (paper: 0.2)",
        min=0.0,
        max=1.0,
        tasks=VFL,
    ),
    "selection.keep": Field(
        float,
        0.5,
        "discrete / relaxed: share of the rows in a drawn subset",
        min=0.0,
        max=1.0,
        exclusive_min=True,
        tasks=VFL,
    ),
    "selection.arrival": Field(
        float, 0.05, "relaxed: probability per epoch that an absent row arrives", min=0.0, max=1.0, tasks=VFL
    ),
    "selection.lifespan_min": Field(
        int, 1, "relaxed: shortest lifespan of a row, in epochs", min=1, tasks=VFL
    ),
    "selection.lifespan_max": Field(
        int, 50, "relaxed: longest lifespan of a row, in epochs", min=1, tasks=VFL
    ),
    "selection.every": Field(
        int, 0, "also re-select every this many epochs (0: only when the data change)", min=0, tasks=VFL
    ),
    # -- continual horizontal FL (task = chfl) -----------------------------------------------------
    "chfl.method": Field(
        str,
        "chfl",
        "chfl, or a baseline: common (FedAvg on common features), local, concat (section V-B5), fedprox",
        choices=("chfl", "common", "local", "concat", "fedprox"),
        tasks=CHFL,
    ),
    "chfl.mode": Field(
        str,
        "batch",
        "batch: the paper's rounds of local epochs; stream: samples arrive online",
        choices=("batch", "stream"),
        tasks=CHFL,
    ),
    "chfl.clients": Field(int, 5, "number of clients K", min=1, tasks=CHFL),
    "chfl.common_ratio": Field(
        float,
        0.3,
        "fraction r of the features every client has",
        min=0.0,
        max=1.0,
        exclusive_min=True,
        exclusive_max=True,
        tasks=CHFL,
    ),
    "chfl.split": Field(
        str,
        "random",
        "how common features are drawn (Table IV: by correlation with the rest)",
        choices=("random", "max-corr", "median-corr", "min-corr"),
        tasks=CHFL,
    ),
    "chfl.split_index": Field(int, 0, "which random feature split (seeds the split)", min=0, tasks=CHFL),
    "chfl.rounds": Field(int, 3, "FedAvg rounds T (not given by the paper)", min=1, tasks=CHFL),
    "chfl.local_epochs": Field(int, 5, "local epochs per round (paper: 5)", min=1, tasks=CHFL),
    "chfl.batch_size": Field(int, 64, "mini-batch size (paper: 64)", min=1, tasks=CHFL),
    "chfl.hidden": Field(str, "512,256,128", "hidden widths of each column, comma-separated", tasks=CHFL),
    "chfl.lrs": Field(
        str, "0.003,0.001", "Adam learning rates each client chooses from on validation", tasks=CHFL
    ),
    "chfl.mus": Field(str, "0,0.5,1", "lateral-connection scales mu each client chooses from", tasks=CHFL),
    "chfl.prox_mu": Field(float, 0.01, "FedProx proximal weight", min=0.0, exclusive_min=True, tasks=CHFL),
    "chfl.max_rows": Field(
        int, None, "use only this many rows of the dataset", min=1, optional=True, tasks=CHFL
    ),
    "chfl.baselines": Field(
        str,
        "common",
        "baselines a chfl run also scores in its own federation (they share its "
        "common column): comma-separated common, concat; empty: none",
        tasks=CHFL,
    ),
    "chfl.stream_batch": Field(int, 16, "stream mode: samples per tick per active client", min=1, tasks=CHFL),
    "chfl.stream_sync_every": Field(int, 10, "stream mode: ticks between FedAvg rounds", min=1, tasks=CHFL),
    "chfl.stream_lr": Field(
        float, 0.001, "stream mode: Adam learning rate", min=0.0, exclusive_min=True, tasks=CHFL
    ),
    "chfl.stream_mu": Field(
        float, 0.5, "stream mode: lateral-connection scale", min=0.0, max=1.0, tasks=CHFL
    ),
    "chfl.stream_late_join": Field(
        float,
        0.5,
        "stream mode: fraction of the stream after which the last client joins",
        min=0.0,
        max=1.0,
        exclusive_max=True,
        tasks=CHFL,
    ),
    "chfl.stream_eval_every": Field(
        int, 20, "stream mode: ticks per point of the accuracy curve", min=1, tasks=CHFL
    ),
}
