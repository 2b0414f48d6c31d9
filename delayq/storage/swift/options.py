"""Options of the Swift driver, in ``[drivers:message_store:swift]``."""

from oslo_config import cfg

GROUP = "drivers:message_store:swift"

OPTS = [
    cfg.StrOpt("auth_url", default="http://127.0.0.1:8080/auth/v1.0",
               help="Authentication endpoint: a tempauth/swauth URL (…/auth/v1.0) with "
                    "auth_version 1, or a Keystone URL (…/v3) with auth_version 3."),
    cfg.StrOpt("auth_version", default="1", choices=["1", "3"],
               help="1: tempauth (user is ACCOUNT:USER); 3: Keystone v3."),
    cfg.StrOpt("user", default="delayq:delayq",
               help="User name (tempauth: account:user)."),
    cfg.StrOpt("key", default="", secret=True, help="The user's password or key."),
    cfg.StrOpt("project_name", help="Keystone v3: the project (tenant) to scope to."),
    cfg.StrOpt("project_domain_name", default="Default",
               help="Keystone v3: the project's domain."),
    cfg.StrOpt("user_domain_name", default="Default", help="Keystone v3: the user's domain."),
    cfg.StrOpt("project_domain_id",
               help="Keystone v3: the project's domain by id (instead of by name)."),
    cfg.StrOpt("user_domain_id", help="Keystone v3: the user's domain by id (instead of by "
                                      "name)."),
    cfg.StrOpt("region_name", help="Keystone v3: the region whose object-store endpoint "
                                   "to use."),
    cfg.StrOpt("interface", default="public", choices=["public", "internal", "admin"],
               help="Keystone v3: which endpoint of the catalogue to use."),
    cfg.BoolOpt("insecure", default=False, help="Skip TLS certificate verification."),
    cfg.StrOpt("cacert", help="CA bundle to verify the TLS certificates with."),
    cfg.StrOpt("container_prefix", default="dq",
               help="Prefix of every container delayq creates in the account, so several "
                    "deployments can share one account."),
    cfg.FloatOpt("timeout", default=10.0, min=0.1,
                 help="Seconds to wait for a Swift reply before the request fails with "
                      "503."),
    cfg.IntOpt("concurrency", default=16, min=1,
               help="Swift requests each API worker process makes in parallel, shared by "
                    "the API requests it serves (a claim of 10 messages touches each of "
                    "them at once)."),
    cfg.FloatOpt("claim_settle_time", default=0.1, min=0.0,
                 help="Seconds a claimer waits after creating a claim marker before reading "
                      "it back to learn whether it won. Swift's conditional PUT "
                      "(If-None-Match: *) is not atomic: racing PUTs may all succeed and the "
                      "one with the latest timestamp stays. This must exceed the longest time "
                      "an object server takes between checking for and storing a small "
                      "object (normally milliseconds); a larger value only slows claims."),
    cfg.FloatOpt("clock_sync_interval", default=30.0, min=1.0,
                 help="Seconds between readings of the Swift proxy's clock, which every "
                      "API process keeps time by."),
    cfg.FloatOpt("tally_flush_interval", default=1.0, min=0.01,
                 help="Seconds between writes of each API process's tallies (the running "
                      "counts the /metrics gauges read) to Swift. A process sees its own "
                      "changes in the gauges at once, other processes' within this time; a "
                      "process killed loses at most this long of its counts, an error "
                      "confined to the instants of the messages it changed meanwhile, "
                      "which ends when they would have expired."),
    cfg.IntOpt("tally_writer_lease", default=300, min=30,
               help="Seconds of the lease by which an API process holds its tally writer "
                    "slot (the name under which it alone writes its tallies; processes "
                    "reuse the slots of those gone, so the tally objects a count reads "
                    "are bounded by the processes alive at once). The process renews it "
                    "every fifth of this time and stops writing when a third is left "
                    "unrenewed; a slot of a process killed is taken again this long "
                    "after its last renewal at most."),
    cfg.IntOpt("reap_interval", default=30, min=0,
               help="Seconds between passes of the background reaper, which removes the "
                    "expired messages of every queue and reports each (the expired "
                    "events and the delayq_messages_expired_total counter). One worker of "
                    "the deployment runs each pass, which lists every queue's container "
                    "and the part of its index that is due. 0 disables it: then only the "
                    "claims that meet expired messages remove them, and the others stay "
                    "uncounted until Swift drops them (expired_retention)."),
    cfg.IntOpt("expired_retention", default=3600, min=60,
               help="Seconds an expired message stays stored (X-Delete-At is its expiry "
                    "plus this), hidden from every read, for the reaper to remove and "
                    "count it; past this, Swift's object expirer drops it unseen and "
                    "uncounted. Keep it well above reap_interval (a pass of a large "
                    "deployment may take a while)."),
]
