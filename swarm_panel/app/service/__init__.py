"""The running engine: built from settings (engine_factory, the one door to CPU tuning), reloadable
with its knobs kept (engine_service), who each request comes from and what each agent's requests did
(agents), and the step feed the panel and exporters read. Imports settings, chat and runtime.
"""
