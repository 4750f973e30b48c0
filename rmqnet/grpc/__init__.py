"""RocketMQ 5's gRPC protocol (``apache.rocketmq.v2``), sans-I/O: the message modules
compiled from the protocol definitions (:mod:`rmqnet.grpc.v2`), the conversion of a gRPC
message into the remoting send it is served as (:mod:`rmqnet.grpc.convert`), the status
codes and the client settings the server answers (:mod:`rmqnet.grpc.settings`). No socket,
no event loop, no store import: the broker's endpoint (:mod:`rmqnet.broker.grpc_server`)
serves them."""
