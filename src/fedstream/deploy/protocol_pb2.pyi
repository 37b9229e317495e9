from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROUND: _ClassVar[Type]
    SETUP: _ClassVar[Type]
    FINISH: _ClassVar[Type]
    HELLO: _ClassVar[Type]
    ERROR: _ClassVar[Type]
    BYE: _ClassVar[Type]
    ECHO: _ClassVar[Type]
    PSI: _ClassVar[Type]

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    FLOAT32: _ClassVar[DType]
    FLOAT64: _ClassVar[DType]
    INT32: _ClassVar[DType]
    INT64: _ClassVar[DType]
    UINT8: _ClassVar[DType]
    BOOL: _ClassVar[DType]
ROUND: Type
SETUP: Type
FINISH: Type
HELLO: Type
ERROR: Type
BYE: Type
ECHO: Type
PSI: Type
DTYPE_UNSPECIFIED: DType
FLOAT32: DType
FLOAT64: DType
INT32: DType
INT64: DType
UINT8: DType
BOOL: DType
ROUNDS_FIELD_NUMBER: _ClassVar[int]
rounds: _descriptor.FieldDescriptor

class Tensor(_message.Message):
    __slots__ = ("name", "dtype", "shape", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("type", "seq", "round", "parts", "ovfl_round_request", "ovfl_round_reply", "vfl_train_request", "vfl_test_request", "vfl_select_request", "chfl_round_request", "chfl_round_reply", "chfl_segment_request", "chfl_segment_reply", "error", "ovfl_finish_request", "hello", "setup", "ovfl_setup_reply", "finish_reply", "vfl_finish_request", "vfl_setup_reply", "chfl_setup_reply", "chfl_stream_setup_reply", "psi_step", "psi_ack", "predict_request", "predict_reply", "predict_setup_reply", "arrays")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    OVFL_ROUND_REQUEST_FIELD_NUMBER: _ClassVar[int]
    OVFL_ROUND_REPLY_FIELD_NUMBER: _ClassVar[int]
    VFL_TRAIN_REQUEST_FIELD_NUMBER: _ClassVar[int]
    VFL_TEST_REQUEST_FIELD_NUMBER: _ClassVar[int]
    VFL_SELECT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    CHFL_ROUND_REQUEST_FIELD_NUMBER: _ClassVar[int]
    CHFL_ROUND_REPLY_FIELD_NUMBER: _ClassVar[int]
    CHFL_SEGMENT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    CHFL_SEGMENT_REPLY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OVFL_FINISH_REQUEST_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    SETUP_FIELD_NUMBER: _ClassVar[int]
    OVFL_SETUP_REPLY_FIELD_NUMBER: _ClassVar[int]
    FINISH_REPLY_FIELD_NUMBER: _ClassVar[int]
    VFL_FINISH_REQUEST_FIELD_NUMBER: _ClassVar[int]
    VFL_SETUP_REPLY_FIELD_NUMBER: _ClassVar[int]
    CHFL_SETUP_REPLY_FIELD_NUMBER: _ClassVar[int]
    CHFL_STREAM_SETUP_REPLY_FIELD_NUMBER: _ClassVar[int]
    PSI_STEP_FIELD_NUMBER: _ClassVar[int]
    PSI_ACK_FIELD_NUMBER: _ClassVar[int]
    PREDICT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    PREDICT_REPLY_FIELD_NUMBER: _ClassVar[int]
    PREDICT_SETUP_REPLY_FIELD_NUMBER: _ClassVar[int]
    ARRAYS_FIELD_NUMBER: _ClassVar[int]
    type: Type
    seq: int
    round: int
    parts: _containers.RepeatedScalarFieldContainer[bytes]
    ovfl_round_request: OvflRoundRequest
    ovfl_round_reply: OvflRoundReply
    vfl_train_request: VflTrainRequest
    vfl_test_request: VflTestRequest
    vfl_select_request: VflSelectRequest
    chfl_round_request: ChflRoundRequest
    chfl_round_reply: ChflRoundReply
    chfl_segment_request: ChflSegmentRequest
    chfl_segment_reply: ChflSegmentReply
    error: Error
    ovfl_finish_request: OvflFinishRequest
    hello: Hello
    setup: Setup
    ovfl_setup_reply: OvflSetupReply
    finish_reply: FinishReply
    vfl_finish_request: VflFinishRequest
    vfl_setup_reply: VflSetupReply
    chfl_setup_reply: ChflSetupReply
    chfl_stream_setup_reply: ChflStreamSetupReply
    psi_step: PsiStep
    psi_ack: PsiAck
    predict_request: PredictRequest
    predict_reply: PredictReply
    predict_setup_reply: PredictSetupReply
    arrays: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, type: _Optional[_Union[Type, str]] = ..., seq: _Optional[int] = ..., round: _Optional[int] = ..., parts: _Optional[_Iterable[bytes]] = ..., ovfl_round_request: _Optional[_Union[OvflRoundRequest, _Mapping]] = ..., ovfl_round_reply: _Optional[_Union[OvflRoundReply, _Mapping]] = ..., vfl_train_request: _Optional[_Union[VflTrainRequest, _Mapping]] = ..., vfl_test_request: _Optional[_Union[VflTestRequest, _Mapping]] = ..., vfl_select_request: _Optional[_Union[VflSelectRequest, _Mapping]] = ..., chfl_round_request: _Optional[_Union[ChflRoundRequest, _Mapping]] = ..., chfl_round_reply: _Optional[_Union[ChflRoundReply, _Mapping]] = ..., chfl_segment_request: _Optional[_Union[ChflSegmentRequest, _Mapping]] = ..., chfl_segment_reply: _Optional[_Union[ChflSegmentReply, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., ovfl_finish_request: _Optional[_Union[OvflFinishRequest, _Mapping]] = ..., hello: _Optional[_Union[Hello, _Mapping]] = ..., setup: _Optional[_Union[Setup, _Mapping]] = ..., ovfl_setup_reply: _Optional[_Union[OvflSetupReply, _Mapping]] = ..., finish_reply: _Optional[_Union[FinishReply, _Mapping]] = ..., vfl_finish_request: _Optional[_Union[VflFinishRequest, _Mapping]] = ..., vfl_setup_reply: _Optional[_Union[VflSetupReply, _Mapping]] = ..., chfl_setup_reply: _Optional[_Union[ChflSetupReply, _Mapping]] = ..., chfl_stream_setup_reply: _Optional[_Union[ChflStreamSetupReply, _Mapping]] = ..., psi_step: _Optional[_Union[PsiStep, _Mapping]] = ..., psi_ack: _Optional[_Union[PsiAck, _Mapping]] = ..., predict_request: _Optional[_Union[PredictRequest, _Mapping]] = ..., predict_reply: _Optional[_Union[PredictReply, _Mapping]] = ..., predict_setup_reply: _Optional[_Union[PredictSetupReply, _Mapping]] = ..., arrays: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("client",)
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    client: int
    def __init__(self, client: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Setup(_message.Message):
    __slots__ = ("config", "run", "rejoin", "resume")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    REJOIN_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    config: str
    run: str
    rejoin: bool
    resume: int
    def __init__(self, config: _Optional[str] = ..., run: _Optional[str] = ..., rejoin: _Optional[bool] = ..., resume: _Optional[int] = ...) -> None: ...

class FinishReply(_message.Message):
    __slots__ = ("client", "round", "up", "down", "messages", "digest", "eval_up", "select_up", "select_down", "choices")
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    DOWN_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    EVAL_UP_FIELD_NUMBER: _ClassVar[int]
    SELECT_UP_FIELD_NUMBER: _ClassVar[int]
    SELECT_DOWN_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    client: int
    round: int
    up: int
    down: int
    messages: int
    digest: str
    eval_up: int
    select_up: int
    select_down: int
    choices: str
    def __init__(self, client: _Optional[int] = ..., round: _Optional[int] = ..., up: _Optional[int] = ..., down: _Optional[int] = ..., messages: _Optional[int] = ..., digest: _Optional[str] = ..., eval_up: _Optional[int] = ..., select_up: _Optional[int] = ..., select_down: _Optional[int] = ..., choices: _Optional[str] = ...) -> None: ...

class OvflRoundRequest(_message.Message):
    __slots__ = ("keep", "boundary", "events", "grad_rounds", "active")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    GRAD_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    keep: bool
    boundary: int
    events: int
    grad_rounds: _containers.RepeatedScalarFieldContainer[int]
    active: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keep: _Optional[bool] = ..., boundary: _Optional[int] = ..., events: _Optional[int] = ..., grad_rounds: _Optional[_Iterable[int]] = ..., active: _Optional[_Iterable[int]] = ...) -> None: ...

class OvflRoundReply(_message.Message):
    __slots__ = ("active",)
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    active: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, active: _Optional[_Iterable[int]] = ...) -> None: ...

class OvflFinishRequest(_message.Message):
    __slots__ = ("keep", "boundary", "grad_rounds", "models")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    GRAD_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    keep: bool
    boundary: int
    grad_rounds: _containers.RepeatedScalarFieldContainer[int]
    models: bool
    def __init__(self, keep: _Optional[bool] = ..., boundary: _Optional[int] = ..., grad_rounds: _Optional[_Iterable[int]] = ..., models: _Optional[bool] = ...) -> None: ...

class OvflSetupReply(_message.Message):
    __slots__ = ("client", "round", "n_features", "block_start", "block_stop", "ids", "categorical")
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    N_FEATURES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_START_FIELD_NUMBER: _ClassVar[int]
    BLOCK_STOP_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    CATEGORICAL_FIELD_NUMBER: _ClassVar[int]
    client: int
    round: int
    n_features: int
    block_start: int
    block_stop: int
    ids: str
    categorical: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client: _Optional[int] = ..., round: _Optional[int] = ..., n_features: _Optional[int] = ..., block_start: _Optional[int] = ..., block_stop: _Optional[int] = ..., ids: _Optional[str] = ..., categorical: _Optional[_Iterable[str]] = ...) -> None: ...

class VflTrainRequest(_message.Message):
    __slots__ = ("keep", "boundary", "split", "rows")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    keep: bool
    boundary: int
    split: str
    rows: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keep: _Optional[bool] = ..., boundary: _Optional[int] = ..., split: _Optional[str] = ..., rows: _Optional[_Iterable[int]] = ...) -> None: ...

class VflTestRequest(_message.Message):
    __slots__ = ("keep", "boundary", "split", "rows", "sizes", "steps")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    keep: bool
    boundary: int
    split: str
    rows: _containers.RepeatedScalarFieldContainer[int]
    sizes: _containers.RepeatedScalarFieldContainer[int]
    steps: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keep: _Optional[bool] = ..., boundary: _Optional[int] = ..., split: _Optional[str] = ..., rows: _Optional[_Iterable[int]] = ..., sizes: _Optional[_Iterable[int]] = ..., steps: _Optional[_Iterable[int]] = ...) -> None: ...

class VflSelectRequest(_message.Message):
    __slots__ = ("keep", "boundary", "split", "rows", "queries")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    keep: bool
    boundary: int
    split: str
    rows: _containers.RepeatedScalarFieldContainer[int]
    queries: int
    def __init__(self, keep: _Optional[bool] = ..., boundary: _Optional[int] = ..., split: _Optional[str] = ..., rows: _Optional[_Iterable[int]] = ..., queries: _Optional[int] = ...) -> None: ...

class VflFinishRequest(_message.Message):
    __slots__ = ("keep", "boundary", "models")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    keep: bool
    boundary: int
    models: bool
    def __init__(self, keep: _Optional[bool] = ..., boundary: _Optional[int] = ..., models: _Optional[bool] = ...) -> None: ...

class VflSetupReply(_message.Message):
    __slots__ = ("client", "shape", "n_train", "n_test", "step", "pending", "ids", "categorical")
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    N_TRAIN_FIELD_NUMBER: _ClassVar[int]
    N_TEST_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    CATEGORICAL_FIELD_NUMBER: _ClassVar[int]
    client: int
    shape: _containers.RepeatedScalarFieldContainer[int]
    n_train: int
    n_test: int
    step: int
    pending: int
    ids: str
    categorical: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client: _Optional[int] = ..., shape: _Optional[_Iterable[int]] = ..., n_train: _Optional[int] = ..., n_test: _Optional[int] = ..., step: _Optional[int] = ..., pending: _Optional[int] = ..., ids: _Optional[str] = ..., categorical: _Optional[_Iterable[str]] = ...) -> None: ...

class ChflRoundRequest(_message.Message):
    __slots__ = ("keep", "boundary", "lr_index", "validate", "epochs")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    LR_INDEX_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    keep: bool
    boundary: int
    lr_index: int
    validate: bool
    epochs: int
    def __init__(self, keep: _Optional[bool] = ..., boundary: _Optional[int] = ..., lr_index: _Optional[int] = ..., validate: _Optional[bool] = ..., epochs: _Optional[int] = ...) -> None: ...

class ChflRoundReply(_message.Message):
    __slots__ = ("n_train", "val")
    N_TRAIN_FIELD_NUMBER: _ClassVar[int]
    VAL_FIELD_NUMBER: _ClassVar[int]
    n_train: int
    val: float
    def __init__(self, n_train: _Optional[int] = ..., val: _Optional[float] = ...) -> None: ...

class ChflSetupReply(_message.Message):
    __slots__ = ("client", "lr_index", "round", "n_rows", "n_classes", "n_features", "n_common", "n_test", "n_unique", "n_train", "n_val", "common", "unique")
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    LR_INDEX_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    N_ROWS_FIELD_NUMBER: _ClassVar[int]
    N_CLASSES_FIELD_NUMBER: _ClassVar[int]
    N_FEATURES_FIELD_NUMBER: _ClassVar[int]
    N_COMMON_FIELD_NUMBER: _ClassVar[int]
    N_TEST_FIELD_NUMBER: _ClassVar[int]
    N_UNIQUE_FIELD_NUMBER: _ClassVar[int]
    N_TRAIN_FIELD_NUMBER: _ClassVar[int]
    N_VAL_FIELD_NUMBER: _ClassVar[int]
    COMMON_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FIELD_NUMBER: _ClassVar[int]
    client: int
    lr_index: int
    round: int
    n_rows: int
    n_classes: int
    n_features: int
    n_common: int
    n_test: int
    n_unique: int
    n_train: int
    n_val: int
    common: _containers.RepeatedScalarFieldContainer[int]
    unique: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, client: _Optional[int] = ..., lr_index: _Optional[int] = ..., round: _Optional[int] = ..., n_rows: _Optional[int] = ..., n_classes: _Optional[int] = ..., n_features: _Optional[int] = ..., n_common: _Optional[int] = ..., n_test: _Optional[int] = ..., n_unique: _Optional[int] = ..., n_train: _Optional[int] = ..., n_val: _Optional[int] = ..., common: _Optional[_Iterable[int]] = ..., unique: _Optional[_Iterable[int]] = ...) -> None: ...

class ChflStreamSetupReply(_message.Message):
    __slots__ = ("client", "tick", "n_rows", "n_features", "n_common", "n_classes", "n_ticks", "join_tick")
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    TICK_FIELD_NUMBER: _ClassVar[int]
    N_ROWS_FIELD_NUMBER: _ClassVar[int]
    N_FEATURES_FIELD_NUMBER: _ClassVar[int]
    N_COMMON_FIELD_NUMBER: _ClassVar[int]
    N_CLASSES_FIELD_NUMBER: _ClassVar[int]
    N_TICKS_FIELD_NUMBER: _ClassVar[int]
    JOIN_TICK_FIELD_NUMBER: _ClassVar[int]
    client: int
    tick: int
    n_rows: int
    n_features: int
    n_common: int
    n_classes: int
    n_ticks: int
    join_tick: int
    def __init__(self, client: _Optional[int] = ..., tick: _Optional[int] = ..., n_rows: _Optional[int] = ..., n_features: _Optional[int] = ..., n_common: _Optional[int] = ..., n_classes: _Optional[int] = ..., n_ticks: _Optional[int] = ..., join_tick: _Optional[int] = ...) -> None: ...

class ChflSegmentRequest(_message.Message):
    __slots__ = ("keep", "boundary", "until", "upload")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    keep: bool
    boundary: int
    until: int
    upload: bool
    def __init__(self, keep: _Optional[bool] = ..., boundary: _Optional[int] = ..., until: _Optional[int] = ..., upload: _Optional[bool] = ...) -> None: ...

class ChflSegmentReply(_message.Message):
    __slots__ = ("correct",)
    CORRECT_FIELD_NUMBER: _ClassVar[int]
    correct: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, correct: _Optional[_Iterable[int]] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PredictReply(_message.Message):
    __slots__ = ("held",)
    HELD_FIELD_NUMBER: _ClassVar[int]
    held: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, held: _Optional[_Iterable[int]] = ...) -> None: ...

class PredictSetupReply(_message.Message):
    __slots__ = ("client", "digest", "width", "saved")
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    SAVED_FIELD_NUMBER: _ClassVar[int]
    client: int
    digest: str
    width: int
    saved: str
    def __init__(self, client: _Optional[int] = ..., digest: _Optional[str] = ..., width: _Optional[int] = ..., saved: _Optional[str] = ...) -> None: ...

class PredictQuery(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PredictAnswer(_message.Message):
    __slots__ = ("ids", "classes", "labels", "proba", "absent")
    IDS_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PROBA_FIELD_NUMBER: _ClassVar[int]
    ABSENT_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    classes: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.RepeatedScalarFieldContainer[str]
    proba: _containers.RepeatedScalarFieldContainer[float]
    absent: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., classes: _Optional[_Iterable[str]] = ..., labels: _Optional[_Iterable[str]] = ..., proba: _Optional[_Iterable[float]] = ..., absent: _Optional[_Iterable[str]] = ...) -> None: ...

class PsiStep(_message.Message):
    __slots__ = ("config", "piece", "pieces")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PIECE_FIELD_NUMBER: _ClassVar[int]
    PIECES_FIELD_NUMBER: _ClassVar[int]
    config: str
    piece: int
    pieces: int
    def __init__(self, config: _Optional[str] = ..., piece: _Optional[int] = ..., pieces: _Optional[int] = ...) -> None: ...

class PsiAck(_message.Message):
    __slots__ = ("pieces", "piece")
    PIECES_FIELD_NUMBER: _ClassVar[int]
    PIECE_FIELD_NUMBER: _ClassVar[int]
    pieces: int
    piece: int
    def __init__(self, pieces: _Optional[int] = ..., piece: _Optional[int] = ...) -> None: ...
