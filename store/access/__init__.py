"""The put path and the read path of a wired store: how messages go into the commitlog
(:mod:`.appender`) and come out of its consume queues (:mod:`.reader`).

Above the wired parts (:mod:`rmqlog.parts`), which they receive: the put path needs the
append state, the topics, the flush service and the dispatcher together, the read path the
queues, the commitlog and the topics. Below the services that use them (the scheduler) and
the facade.
"""
