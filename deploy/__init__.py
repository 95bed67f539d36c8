"""Deploy helpers: the function source zip, the offline Terraform checks, the Slack app manifest.

Nothing here runs in the cloud; these are build and check tools for ``make``.
"""
