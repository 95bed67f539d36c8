# Resources once declared one by one and now rows of a for_each table: Terraform moves each deployment's existing
# resource to its new address instead of destroying it and creating it again.

# The composite indexes (firestore.tf).
moved {
  from = google_firestore_index.questions_by_age
  to   = google_firestore_index.composite["questions_by_age"]
}

moved {
  from = google_firestore_index.approvals_by_age
  to   = google_firestore_index.composite["approvals_by_age"]
}

moved {
  from = google_firestore_index.sessions_by_age
  to   = google_firestore_index.composite["sessions_by_age"]
}

moved {
  from = google_firestore_index.silent_exits_to_follow_up
  to   = google_firestore_index.composite["silent_exits_to_follow_up"]
}

moved {
  from = google_firestore_index.sessions_by_lease
  to   = google_firestore_index.composite["sessions_by_lease"]
}

moved {
  from = google_firestore_index.sessions_in_thread
  to   = google_firestore_index.composite["sessions_in_thread"]
}

# The service accounts Google's services act as (iam.tf).
moved {
  from = google_service_account.tasks_invoker
  to   = google_service_account.platform["tasks_invoker"]
}

moved {
  from = google_service_account.scheduler
  to   = google_service_account.platform["scheduler"]
}

moved {
  from = google_service_account.build
  to   = google_service_account.platform["build"]
}

# The Cloud Scheduler jobs (scheduler.tf).
moved {
  from = google_cloud_scheduler_job.sweep
  to   = google_cloud_scheduler_job.this["sweep"]
}

moved {
  from = google_cloud_scheduler_job.rescue
  to   = google_cloud_scheduler_job.this["rescue"]
}
