"""Reading a RocketMQ ``broker.conf``: a Java properties file.

The file is read by ``javaproperties`` (a maintained implementation of
``java.util.Properties.load``), so every form the broker accepts is read the same way here:
``key=value``, ``key:value`` and ``key value`` (any of ``=``, ``:`` or whitespace separates,
with spaces around it), lines continued with a trailing backslash, escapes (``\\t``,
``\\uXXXX``, an escaped ``=``, ``:`` or space inside a key), comments starting with ``#`` or
``!``, blank lines, and the last of a repeated key winning. The file is read as UTF-8 (Java 9+
reads properties files as UTF-8 too), falling back to Latin-1, ``Properties.load``'s own
encoding, for a file that is not UTF-8.

What the broker then does with the values (``MixAll.properties2Object``) is matched by
:meth:`rmqlog.StoreConfig.from_properties`: keys are setter names, values are parsed to the
field's type. The broker ignores what it does not know, silently; here a key that no
RocketMQ broker reads is logged as a warning naming it (a misspelt ``flushDiskTyp`` would
otherwise leave the store on its default), and the RocketMQ keys this store has no use for
(``brokerName``, ``namesrvAddr``, ...) are logged at debug level only.
"""

from __future__ import annotations

import difflib
import logging
import os
from pathlib import Path

import javaproperties

from .errors import ConfigError

log = logging.getLogger(__name__)

#: Every key RocketMQ 4.9.8's broker reads from broker.conf: the setters of BrokerConfig,
#: MessageStoreConfig, NettyServerConfig and NettyClientConfig (MixAll.properties2Object), and
#: the two BrokerStartup.properties2SystemEnv reads.
_BROKER_KEYS = """
    accessMessageInMemoryMaxRatio aclEnable adminBrokerThreadPoolNums
    autoCreateSubscriptionGroup autoCreateTopicEnable autoDeleteUnusedStats
    bitMapLengthConsumeQueueExt brokerClusterName brokerFastFailureEnable brokerIP1 brokerIP2
    brokerId brokerName brokerPermission brokerRole brokerTopicEnable channelNotActiveInterval
    checkCRCOnRecover cleanFileForciblyEnable cleanResourceInterval clientAsyncSemaphoreValue
    clientCallbackExecutorThreads clientChannelMaxIdleTimeSeconds clientCloseSocketIfTimeout
    clientManageThreadPoolNums clientManagerThreadPoolQueueCapacity clientOnewaySemaphoreValue
    clientPooledByteBufAllocatorEnable clientSocketRcvBufSize clientSocketSndBufSize
    clientWorkerThreads clusterTopicEnable commercialBaseCount commercialBigCount
    commercialEnable commercialTimerCount commercialTransCount commitCommitLogLeastPages
    commitCommitLogThoroughInterval commitIntervalCommitLog compressedRegister configBlackList
    connectTimeoutMillis consumerFallbehindThreshold consumerManageThreadPoolNums
    consumerManagerThreadPoolQueueCapacity dLegerGroup dLegerPeers dLegerSelfId debugLockEnable
    defaultQueryMaxNum defaultTopicQueueNums deleteCommitLogFilesInterval
    deleteConsumeQueueFilesInterval deleteWhen destroyMapedFileIntervalForcibly
    disableConsumeIfConsumerReadSlowly diskFallRecorded diskMaxUsedSpaceRatio duplicationEnable
    enableBatchPush enableCalcFilterBitMap enableConsumeQueueExt enableDLegerCommitLog
    enableDetailStat enableLmq enableMultiDispatch enablePropertyFilter
    enableScheduleAsyncDeliver enableScheduleMessageStats endTransactionPoolQueueCapacity
    endTransactionThreadPoolNums expectConsumerNumUseFilter fastFailIfNoBufferInStorePool
    fetchNamesrvAddrByAddressServer fileReservedTime filterDataCleanTimeSpan filterServerNums
    filterSupportRetry flushCommitLogLeastPages flushCommitLogThoroughInterval
    flushCommitLogTimed flushConsumeQueueLeastPages flushConsumeQueueThoroughInterval
    flushConsumerOffsetHistoryInterval flushConsumerOffsetInterval flushDelayOffsetInterval
    flushDiskType flushIntervalCommitLog flushIntervalConsumeQueue
    flushLeastPagesWhenWarmMapedFile forceRegister haHousekeepingInterval haListenPort
    haMasterAddress haSendHeartbeatInterval haSlaveFallbehindMax haTransferBatchSize
    heartbeatThreadPoolNums heartbeatThreadPoolQueueCapacity highSpeedMode isolateLogEnable
    listenPort longPollingEnable mappedFileSizeCommitLog mappedFileSizeConsumeQueue
    mappedFileSizeConsumeQueueExt maxDelayTime maxErrorRateOfBloomFilter maxHashSlotNum
    maxIndexNum maxLmqConsumeQueueNum maxMessageSize maxMsgsNumBatch
    maxTransferBytesOnMessageInDisk maxTransferBytesOnMessageInMemory
    maxTransferCountOnMessageInDisk maxTransferCountOnMessageInMemory messageDelayLevel
    messageIndexEnable messageIndexSafe messageStorePlugIn msgTraceTopicName namesrvAddr
    notifyConsumerIdsChangedEnable offsetCheckInSlave osPageCacheBusyTimeOutMills
    preferredLeaderId processReplyMessageThreadPoolNums pullMessageThreadPoolNums
    pullThreadPoolQueueCapacity putMessageFutureThreadPoolNums putMsgIndexHightWater
    putThreadPoolQueueCapacity queryMessageThreadPoolNums queryThreadPoolQueueCapacity
    readOnlyCommitLogStorePaths redeleteHangedFileInterval regionId registerBrokerTimeoutMills
    registerNameServerPeriod rejectTransactionMessage replyThreadPoolQueueCapacity
    rmqAddressServerDomain rmqAddressServerSubGroup rocketmqHome
    scheduleAsyncDeliverMaxPendingLimit scheduleAsyncDeliverMaxResendNum2Blocked
    sendMessageThreadPoolNums sendThreadPoolQueueCapacity serverAsyncSemaphoreValue
    serverCallbackExecutorThreads serverChannelMaxIdleTimeSeconds serverOnewaySemaphoreValue
    serverPooledByteBufAllocatorEnable serverSelectorThreads serverSocketBacklog
    serverSocketRcvBufSize serverSocketSndBufSize serverWorkerThreads shortPollingTimeMills
    slaveReadEnable slaveTimeout startAcceptSendRequestTimeStamp storePathCommitLog
    storePathDLedgerCommitLog storePathRootDir storeReplyMessageEnable syncFlushTimeout traceOn
    traceTopicEnable transactionCheckInterval transactionCheckMax transactionTimeOut
    transferMsgByHeap transientStorePoolEnable transientStorePoolSize useEpollNativeSelector
    useReentrantLockWhenPutMessage useTLS waitTimeMillsInHeartbeatQueue waitTimeMillsInPullQueue
    waitTimeMillsInSendQueue waitTimeMillsInTransactionQueue warmMapedFileEnable
    writeBufferHighWaterMark writeBufferLowWaterMark
"""
ROCKETMQ_BROKER_KEYS = frozenset(_BROKER_KEYS.split())


def read_properties(path: object) -> dict[str, str]:
    """The key/value pairs of the Java properties file at ``path`` (values as written, after
    unescaping). Raises :class:`ConfigError` naming the path when it cannot be read (or is not
    a path: a ``str`` or ``os.PathLike`` of ``str``)."""
    if not isinstance(path, str | os.PathLike) or not isinstance(os.fspath(path), str):
        raise ConfigError(f"a broker.conf path must be a str or os.PathLike, got {type(path).__name__} {path!r}"[:200])
    p = Path(path)
    try:
        raw = p.read_bytes()
    except (OSError, ValueError) as exc:  # missing, a folder, no permission; NUL in the path
        raise ConfigError(f"cannot read {p}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # Properties.load(InputStream)'s encoding: never fails
    try:
        return dict(javaproperties.loads(text))
    except javaproperties.InvalidUEscapeError as exc:  # the one error of a text that decodes
        raise ConfigError(f"{p}: not a Java properties file: {exc}") from None


def warn_unknown(path: str | Path, key: str, known: list[str]) -> None:
    """Log that ``key`` of the file at ``path`` means nothing to the store: a warning naming it
    (with the nearest known names) unless it is a RocketMQ broker key, then a debug line."""
    if key in ROCKETMQ_BROKER_KEYS:
        log.debug("%s: %r is a RocketMQ broker setting this store does not use; ignored", path, key)
        return
    near = difflib.get_close_matches(key, sorted(set(known) | ROCKETMQ_BROKER_KEYS), n=3, cutoff=0.75)
    log.warning("%s: unknown key %r ignored%s", path, key, f" (did you mean {', '.join(near)}?)" if near else "")
