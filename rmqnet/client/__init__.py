"""Our Python client of RocketMQ's remoting protocol: a producer (sync, async, batch), a pull
consumer, a POP consumer and admin requests, over :mod:`rmqnet.transport`, used by the tests, the benchmarks
and Spark executors. Blocking methods run on one background event loop
(:mod:`rmqnet.client.loop` says why); ``a``-prefixed coroutines await from any loop.

Its ``__all__`` is the client's public face, and all the Spark data source may import of the
network side (``tests/test_layout.py``): with it the route's vocabulary a caller reads
(``TopicRouteData``, the ``PERM_*`` bits) and the properties' separators.
"""

from rmqlog import encode_message_batch

from ..remoting.names import AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, PERM_READ, PERM_WRITE, retry_topic
from ..remoting.route import TopicRouteData
from .admin import Admin, parse_offset_msg_id
from .allocate import allocate_averagely, read_queues
from .consumer import PullConsumer, PullResult
from .errors import BrokerError, ClientError, NoRouteError, TopicNotFoundError, code_name
from .latency import FaultStrategy, LatencyFaultTolerance, QueueRef, publish_queues
from .message import NAME_VALUE_SEP, PROPERTY_SEP, UniqKeys, message_properties, properties_string
from .pop_consumer import PopConsumer, PopResult
from .producer import RETRY_CODES, Producer, SendResult
from .rebalance import GroupMember
from .records import decode_records
from .remote import RemoteClient
from .transaction import LocalTransactionState, TransactionProducer, TransactionSendResult

#: 320's body (``MessageDecoder.encodeMessages``): the store's encoder, beside its decoder
encode_messages = encode_message_batch

__all__ = [
    "AUTO_CREATE_TOPIC",
    "DEFAULT_TOPIC_QUEUE_NUMS",
    "Admin",
    "parse_offset_msg_id",
    "encode_messages",
    "PullConsumer",
    "PullResult",
    "BrokerError",
    "ClientError",
    "NoRouteError",
    "TopicNotFoundError",
    "code_name",
    "UniqKeys",
    "message_properties",
    "properties_string",
    "Producer",
    "SendResult",
    "decode_records",
    "RemoteClient",
    "allocate_averagely",
    "read_queues",
    "FaultStrategy",
    "LatencyFaultTolerance",
    "QueueRef",
    "publish_queues",
    "RETRY_CODES",
    "GroupMember",
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
    "PopConsumer",
    "PopResult",
    "retry_topic",
    "NAME_VALUE_SEP",
    "PROPERTY_SEP",
    "PERM_READ",
    "PERM_WRITE",
    "TopicRouteData",
]
