"""The wait model: what a paused turn's calls wait on, and what each gets when it resumes."""
