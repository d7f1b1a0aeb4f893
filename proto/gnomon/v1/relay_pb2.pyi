from gnomon.v1 import worker_pb2 as _worker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RelayHeader(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class RelayUp(_message.Message):
    __slots__ = ("frames",)
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: _containers.RepeatedCompositeFieldContainer[UpFrame]
    def __init__(self, frames: _Optional[_Iterable[_Union[UpFrame, _Mapping]]] = ...) -> None: ...

class UpFrame(_message.Message):
    __slots__ = ("stream_id", "open", "message", "close", "heartbeat")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    open: RelayOpen
    message: bytes
    close: RelayClose
    heartbeat: _worker_pb2.Heartbeat
    def __init__(self, stream_id: _Optional[int] = ..., open: _Optional[_Union[RelayOpen, _Mapping]] = ..., message: _Optional[bytes] = ..., close: _Optional[_Union[RelayClose, _Mapping]] = ..., heartbeat: _Optional[_Union[_worker_pb2.Heartbeat, _Mapping]] = ...) -> None: ...

class RelayOpen(_message.Message):
    __slots__ = ("metadata",)
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _containers.RepeatedCompositeFieldContainer[RelayHeader]
    def __init__(self, metadata: _Optional[_Iterable[_Union[RelayHeader, _Mapping]]] = ...) -> None: ...

class RelayClose(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    def __init__(self, cancelled: _Optional[bool] = ...) -> None: ...

class RelayDown(_message.Message):
    __slots__ = ("frames", "heartbeat_frames")
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: _containers.RepeatedCompositeFieldContainer[DownFrame]
    heartbeat_frames: bool
    def __init__(self, frames: _Optional[_Iterable[_Union[DownFrame, _Mapping]]] = ..., heartbeat_frames: _Optional[bool] = ...) -> None: ...

class DownFrame(_message.Message):
    __slots__ = ("stream_id", "message", "end")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    message: bytes
    end: RelayEnd
    def __init__(self, stream_id: _Optional[int] = ..., message: _Optional[bytes] = ..., end: _Optional[_Union[RelayEnd, _Mapping]] = ...) -> None: ...

class RelayEnd(_message.Message):
    __slots__ = ("code", "details", "trailers")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    TRAILERS_FIELD_NUMBER: _ClassVar[int]
    code: int
    details: str
    trailers: _containers.RepeatedCompositeFieldContainer[RelayHeader]
    def __init__(self, code: _Optional[int] = ..., details: _Optional[str] = ..., trailers: _Optional[_Iterable[_Union[RelayHeader, _Mapping]]] = ...) -> None: ...
