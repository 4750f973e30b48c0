"""The processor modules a :class:`~rmqnet.broker.broker.Broker` installs, in order.

Each module has ``install(broker)``: it registers its request codes with
``broker.table.register(code, handler)`` and may add attributes and services to the broker
(RocketMQ's ``BrokerController.registerProcessor``, one module per request family). A module
added here is installed by every broker; two modules registering one code is an error at
start.
"""

from __future__ import annotations

#: module names under ``rmqnet.broker``, installed in this order
PROCESSOR_MODULES: tuple[str, ...] = (
    "send",   # SEND_MESSAGE 10, SEND_MESSAGE_V2 310, SEND_BATCH_MESSAGE 320
    "admin",  # UPDATE_AND_CREATE_TOPIC 17, GET_ALL_TOPIC_CONFIG 21, GET_BROKER_RUNTIME_INFO 28
)
