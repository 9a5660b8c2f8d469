"""Armada's `schedulerobjects.SchedulerReporting` service and messages, built at import.

armada-client 0.5.1 ships no stubs for pkg/api/schedulerobjects/scheduler_reporting.proto, so
its messages are declared here as descriptors, with Armada's package, names and field numbers
(what the wire format depends on), in a private descriptor pool so they never clash with stubs a
later armada-client may bring. Request and answer are Armada's: a report is one text.

The service's method paths are `/schedulerobjects.SchedulerReporting/<Method>`; `stub(channel)`
gives a client's callables for them (the command line and tests use it).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "schedulerobjects"
SERVICE = f"{PACKAGE}.SchedulerReporting"

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_INT32 = descriptor_pb2.FieldDescriptorProto.TYPE_INT32
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL

# message name -> fields (name, number, type, message type or None, oneof index or None)
_MESSAGES: dict[str, list[tuple[str, int, int, str | None, int | None]]] = {
    "MostRecentForQueue": [("queue_name", 1, _STRING, None, None)],
    "MostRecentForJob": [("job_id", 1, _STRING, None, None)],
    "SchedulingReportRequest": [
        ("most_recent_for_queue", 1, _MESSAGE, "MostRecentForQueue", 0),
        ("most_recent_for_job", 2, _MESSAGE, "MostRecentForJob", 0),
        ("verbosity", 3, _INT32, None, None),
    ],
    "SchedulingReport": [("report", 1, _STRING, None, None)],
    "QueueReportRequest": [("queue_name", 1, _STRING, None, None), ("verbosity", 2, _INT32, None, None)],
    "QueueReport": [("report", 1, _STRING, None, None)],
    "JobReportRequest": [("job_id", 1, _STRING, None, None)],
    "JobReport": [("report", 1, _STRING, None, None)],
}
# method -> (request, answer)
METHODS = {
    "GetSchedulingReport": ("SchedulingReportRequest", "SchedulingReport"),
    "GetQueueReport": ("QueueReportRequest", "QueueReport"),
    "GetJobReport": ("JobReportRequest", "JobReport"),
}


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="pkg/api/schedulerobjects/scheduler_reporting.proto", package=PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        if any(oneof is not None for *_, oneof in fields):
            message.oneof_decl.add(name="filter")
        for field_name, number, kind, type_name, oneof in fields:
            field = message.field.add(name=field_name, number=number, type=kind, label=_OPTIONAL)
            if type_name:
                field.type_name = f".{PACKAGE}.{type_name}"
            if oneof is not None:
                field.oneof_index = oneof
    service = proto.service.add(name="SchedulerReporting")
    for method, (request, answer) in METHODS.items():
        service.method.add(name=method, input_type=f".{PACKAGE}.{request}", output_type=f".{PACKAGE}.{answer}")
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())
MESSAGES: dict[str, Any] = {name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}")) for name in _MESSAGES}

SchedulingReportRequest = MESSAGES["SchedulingReportRequest"]
SchedulingReport = MESSAGES["SchedulingReport"]
QueueReportRequest = MESSAGES["QueueReportRequest"]
QueueReport = MESSAGES["QueueReport"]
JobReportRequest = MESSAGES["JobReportRequest"]
JobReport = MESSAGES["JobReport"]
MostRecentForQueue = MESSAGES["MostRecentForQueue"]
MostRecentForJob = MESSAGES["MostRecentForJob"]


def handler(servicer: Any) -> grpc.GenericRpcHandler:
    """The service's handler for a server: ``servicer`` has an async method per name in `METHODS`."""
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            method: grpc.unary_unary_rpc_method_handler(
                getattr(servicer, method),
                request_deserializer=MESSAGES[request].FromString,
                response_serializer=MESSAGES[answer].SerializeToString,
            )
            for method, (request, answer) in METHODS.items()
        },
    )


def stub(channel: grpc.Channel | grpc.aio.Channel) -> dict[str, Any]:
    """A client's callables, by method name."""
    return {
        method: channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=MESSAGES[request].SerializeToString,
            response_deserializer=MESSAGES[answer].FromString,
        )
        for method, (request, answer) in METHODS.items()
    }
